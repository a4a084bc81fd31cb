"""The one SparkSession of a pytest run.

Built the way dbt-spark's `session` connection opens it (Hive support on, local master), so a
dbt run started in-process later (tests/dbt) picks the same session up through
`SparkSession.builder.getOrCreate()`. Everything it writes (warehouse, Derby metastore) lives
under one temporary directory.
"""

from __future__ import annotations

import os
import sys


def build_spark_session(
    base_dir: str,
    app_name: str = "dbt-spark-stream-tests",
    warehouse: str | None = None,
    extra_conf: dict | None = None,
):
    """Create (or return the already running) local SparkSession with warehouse + metastore under
    base_dir (the warehouse elsewhere when given: processes sharing stored results; `extra_conf`:
    more static settings, e.g. Delta Lake's)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    warehouse = warehouse or os.path.join(base_dir, "warehouse")
    metastore = os.path.join(base_dir, "metastore_db")
    os.makedirs(warehouse, exist_ok=True)
    # Derby writes derby.log into the working directory unless told otherwise.
    derby_home = os.path.join(base_dir, "derby")
    os.makedirs(derby_home, exist_ok=True)
    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.sql.warehouse.dir", warehouse)
        .config(
            "spark.hadoop.javax.jdo.option.ConnectionURL",
            f"jdbc:derby:;databaseName={metastore};create=true",
        )
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={derby_home}")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", os.environ.get("DVM_SPARK_DRIVER_MEMORY", "2g"))
        .enableHiveSupport()
    )
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    spark = _started(builder)
    spark.sparkContext.setLogLevel(os.environ.get("DVM_SPARK_LOG_LEVEL", "ERROR"))
    return spark


def warehouse_dir(spark) -> str:
    """The session's warehouse directory as a local filesystem path (no `file:` scheme)."""
    wh = spark.conf.get("spark.sql.warehouse.dir")
    if wh.startswith("file://"):
        wh = wh[len("file://") :]
    elif wh.startswith("file:"):
        wh = wh[len("file:") :]
    return wh


def _started(builder, attempts: int = 3):
    """builder.getOrCreate(), launched again when the JVM dies before it answers: seen once in a
    CI-like run (JAVA_GATEWAY_EXITED, nothing on the JVM's stderr) in a pytest worker that had
    been a Spark Connect client for ten minutes, and not reproduced alone."""
    import sys
    import time

    from pyspark.errors import PySparkRuntimeError

    for attempt in range(1, attempts + 1):
        try:
            return builder.getOrCreate()
        except PySparkRuntimeError as err:
            if "JAVA_GATEWAY_EXITED" not in str(err) or attempt == attempts:
                raise
            print(f"local Spark did not start ({err}); launching it again", file=sys.stderr)
            time.sleep(2)
    raise AssertionError("unreachable")
