"""A class-data-sharing archive for the JVM of a local session (`method: session`).

Every `dbt run` with a local session starts a JVM, which loads and verifies some tens of
thousands of Spark, Hive and Parquet classes while it starts and while it runs its first
queries. A JDK records the classes a run loaded into an archive (`-XX:ArchiveClassesAtExit`) and
maps them in at the start of later runs (`-XX:SharedArchiveFile`): a fresh session's start fell
from 6.4-7.4 s to 3.3-4.3 s on this project's 2-core machine (docs/deployment.md).

    python -m dbt.adapters.spark_stream.class_archive .venv/spark-classes.jsa

runs a small local workload (Hive catalog, Parquet writes and reads, joins, aggregates, Arrow
transfers) in a JVM started as a session's is, and writes the archive it recorded. A profile
then adds `-XX:SharedArchiveFile=<archive>` to `spark.driver.extraJavaOptions`. The archive holds
only what the JVM can check: one made by another JDK, or for other Spark jars (another pyspark),
is ignored by the JVM, which then starts as without it; so is a missing file.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def java_option(archive: str) -> str:
    """The JVM option that maps the archive in (for `spark.driver.extraJavaOptions`)."""
    return f"-XX:SharedArchiveFile={archive}"


def _workload(spark, work: str) -> None:
    """What a stream table's build and refresh make a local session do, small."""
    import pyarrow as pa

    spark.sql("CREATE DATABASE IF NOT EXISTS archive_training")
    orders = spark.range(200_000).selectExpr(
        "id AS order_id",
        "id % 5000 AS customer_id",
        "CAST(id % 1000 AS DECIMAL(12,2)) AS amount",
        "date_add(DATE'2024-01-01', CAST(id % 365 AS INT)) AS order_date",
        "CAST(id AS STRING) AS note",
    )
    path = os.path.join(work, "orders")
    orders.write.mode("overwrite").parquet(path)
    orders.write.mode("overwrite").partitionBy("order_date").parquet(os.path.join(work, "by_date"))
    schema = "order_id BIGINT, customer_id BIGINT, amount DECIMAL(12,2), order_date DATE, note STRING"
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW o ({schema}) USING parquet OPTIONS (path '{path}')")
    spark.sql(f"CREATE OR REPLACE VIEW archive_training.orders_view AS SELECT * FROM parquet.`{path}`")
    spark.sql("SHOW TABLES IN archive_training").collect()
    spark.sql("DESCRIBE TABLE EXTENDED archive_training.orders_view").collect()
    spark.sql("SHOW TBLPROPERTIES archive_training.orders_view").collect()
    queries = [
        "SELECT customer_id, count(*), sum(amount), max(order_date) FROM o GROUP BY customer_id",
        "SELECT a.customer_id, count(*) FROM o a JOIN (SELECT customer_id FROM o WHERE amount > 990) b "
        "ON a.customer_id = b.customer_id GROUP BY a.customer_id",
        "SELECT * FROM (SELECT order_id, row_number() OVER (PARTITION BY customer_id ORDER BY amount DESC) r "
        "FROM o) WHERE r = 1",
        "SELECT customer_id, 'x' AS kind FROM o UNION ALL SELECT order_id, 'y' FROM archive_training.orders_view",
        "SELECT md5(to_json(struct(*))) FROM o WHERE customer_id IN (SELECT customer_id FROM o WHERE note LIKE '1%')",
    ]
    for query in queries:
        spark.sql(query).write.mode("overwrite").parquet(os.path.join(work, "out"))
    spark.sql(queries[0]).toArrow()
    spark.sql("SELECT * FROM o LIMIT 1000").toPandas()
    spark.createDataFrame(pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]}).to_pandas()).createOrReplaceTempView("small")
    spark.sql("SELECT * FROM o JOIN small ON o.customer_id = small.k").count()
    spark.sql("DROP VIEW archive_training.orders_view")
    spark.sql("DROP DATABASE archive_training CASCADE")


def make(archive: str) -> float:
    """Record the archive (replacing the file only when the JVM wrote a new one); returns the
    seconds it took."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    if SparkSession.getActiveSession() is not None:
        # getOrCreate would hand back that session, whose JVM records nothing.
        raise RuntimeError("a class archive is recorded by a JVM of its own: run this module in a new process")
    started = time.time()
    archive = os.path.abspath(archive)
    os.makedirs(os.path.dirname(archive), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="spark-classes-") as work:
        # Recorded beside the target, so that it replaces the target in one step.
        recorded = archive + ".partial"
        if os.path.exists(recorded):
            os.remove(recorded)  # a failed run's
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("dbt-spark-stream class archive")
            .config("spark.sql.warehouse.dir", os.path.join(work, "warehouse"))
            .config(
                "spark.hadoop.javax.jdo.option.ConnectionURL",
                f"jdbc:derby:;databaseName={os.path.join(work, 'metastore_db')};create=true",
            )
            .config(
                "spark.driver.extraJavaOptions",
                f"-Dderby.system.home={work} -XX:ArchiveClassesAtExit={recorded} -Xlog:cds=off -Xlog:cds+dynamic=off",
            )
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .enableHiveSupport()
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        gateway = spark.sparkContext._gateway
        assert gateway is not None  # a local session's: launched by this process
        _workload(spark, work)
        spark.stop()
        # The JVM writes the archive as it exits, which it does when its stdin closes.
        process = gateway.proc
        gateway.shutdown()
        process.stdin.close()
        process.wait(timeout=300)
        if not os.path.exists(recorded) or os.path.getsize(recorded) == 0:
            raise RuntimeError(f"the JVM wrote no class archive (exit {process.returncode}); its output is above")
        os.replace(recorded, archive)
    return time.time() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archive", help="where to write the archive, e.g. .venv/spark-classes.jsa")
    args = parser.parse_args(argv)
    seconds = make(args.archive)
    size = os.path.getsize(args.archive) / 2**20
    print(f"class archive: {args.archive} ({size:.0f} MiB, {seconds:.0f} s); add {java_option(args.archive)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
