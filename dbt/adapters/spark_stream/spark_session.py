"""The SparkSession behind a dbt-spark `method: session` connection.

dbt-spark creates that session lazily, on the first statement, with
`SparkSession.builder.enableHiveSupport()` plus the profile's server_side_parameters. We build
it the same way so that whichever of us comes first, the session has the profile's static
settings (warehouse dir, metastore), and whichever comes second gets the same session.
"""

from __future__ import annotations

import logging
import os
import sys

from dbt.adapters.spark.connections import SparkConnectionMethod
from dbt_common.exceptions import DbtRuntimeError


def require_supported_method(credentials, model: str) -> None:
    if credentials.method not in (
        SparkConnectionMethod.SESSION,
        SparkConnectionMethod.THRIFT,
        "connect",
    ) and not getattr(credentials, "connect_url", None):
        raise DbtRuntimeError(
            f"stream table '{model}': the profile uses method: {credentials.method}, which stream "
            "tables do not support: use `method: session` (Spark in the dbt process), "
            "`method: connect` (a Spark Connect server, host: sc://host:15002) or `method: thrift` "
            f"(a Spark Thrift server). Over method: {credentials.method}, set "
            "`connect_url: sc://host:15002` to the Spark Connect endpoint of the same Spark "
            "application (start it with --conf spark.plugins=org.apache.spark.sql.connect.SparkConnectPlugin)."
        )


def get_spark_session(credentials):
    if credentials.method == "connect" or getattr(credentials, "connect_url", None):
        from dbt.adapters.spark_stream.spark_connect import connect_session

        return connect_session(credentials)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    quiet_query_context_loggers()
    builder = SparkSession.builder.enableHiveSupport()
    for key, value in credentials.server_side_parameters.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def quiet_query_context_loggers() -> None:
    """Stop PySpark printing every analysis error it raises as a JSON record on stderr.

    The same error reaches dbt as an exception (message on the console, traceback in
    logs/dbt.log), and the refresh probes the catalog with statements that may fail on
    purpose; the JSON copies are noise. Created through PySparkLogger so that PySpark later
    gets the logger class it expects.
    """
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
