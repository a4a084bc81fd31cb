"""Delta Lake in Spark for the spark engine's tests: the jars `make jars`
fetched into the venv (or DBT_SPARK_STREAM_DELTA_JARS, a directory), and the settings a session
needs to load them."""

from __future__ import annotations

import os
import sys
from typing import Optional

JARS_ENV = "DBT_SPARK_STREAM_DELTA_JARS"


def jars_dir() -> str:
    return os.environ.get(JARS_ENV) or os.path.join(os.path.dirname(os.path.dirname(sys.executable)), "jars")


def jars() -> list:
    folder = jars_dir()
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.startswith("delta-") and n.endswith(".jar"))


def missing() -> Optional[str]:
    """Why Delta Lake cannot be loaded here, or None."""
    found = jars()
    if not any(os.path.basename(j).startswith("delta-spark") for j in found):
        return f"no delta-spark jar in {jars_dir()}: run `make jars` (Maven fetches them from Maven Central)"
    return None


def spark_conf() -> dict:
    """The settings that load Delta Lake into a Spark session (static: set before it starts)."""
    return {
        "spark.jars": ",".join(jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # Small tables: Delta's log replay in a few partitions instead of 50.
        "spark.databricks.delta.snapshotPartitions": "2",
    }


def server_conf() -> dict:
    """The settings for a Spark server started with spark-submit (a Connect or Thrift server):
    spark_conf() plus the jars on the driver's and executors' class path. A Thrift server runs
    each statement on a thread whose class loader does not see what spark.jars added, and Delta's
    optimizer rules then fail with NoClassDefFoundError."""
    path = ":".join(jars())
    return {**spark_conf(), "spark.driver.extraClassPath": path, "spark.executor.extraClassPath": path}
