"""Profile and connection manager: dbt-spark's, plus the `engine` option and `method: connect`.

Everything else (methods session/thrift/http/odbc, server_side_parameters, retries) is
inherited unchanged so existing dbt-spark profiles keep working after `type: spark_stream`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Optional, Tuple

from dbt.adapters.contracts.connection import Connection, ConnectionState
from dbt.adapters.spark.connections import (
    SparkConnectionManager,
    SparkConnectionMethod,
    SparkCredentials,
)
from dbt_common.dataclass_schema import StrEnum
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.spark_stream import preload
from python_helpers.runtime.refresh.requests import ENGINES

ADAPTER_TYPE = "spark_stream"


class SparkStreamConnectionMethod(StrEnum):
    """dbt-spark's methods plus `connect` (Spark Connect, `sc://host:port`)."""

    THRIFT = "thrift"
    HTTP = "http"
    ODBC = "odbc"
    SESSION = "session"
    CONNECT = "connect"


@dataclass
class SparkStreamCredentials(SparkCredentials):
    method: SparkStreamConnectionMethod = None  # type: ignore[assignment]
    # How refreshes reach Delta: `embedded` (deltalake package, no Delta jars in Spark),
    # `spark` (Delta Lake loaded in Spark), or `auto` (decide per session).
    engine: str = "auto"
    # method: thrift/http/odbc: the Spark Connect endpoint of the same Spark application (a Thrift
    # server started with spark.plugins=org.apache.spark.sql.connect.SparkConnectPlugin), over
    # which stream tables refresh while every other statement goes through the Thrift server.
    connect_url: Optional[str] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.engine = (self.engine or "auto").lower()
        if self.engine not in ENGINES:
            raise DbtRuntimeError(
                f"spark_stream profile: engine must be one of {', '.join(ENGINES)}, got {self.engine!r}"
            )

    @property
    def type(self) -> str:
        return ADAPTER_TYPE

    def _connection_keys(self) -> Tuple[str, ...]:
        # Shown by `dbt debug`.
        return super()._connection_keys() + ("engine", "connect_url")


class SparkStreamConnectionManager(SparkConnectionManager):
    TYPE = ADAPTER_TYPE

    @classmethod
    def open(cls, connection: Connection) -> Connection:
        preload.start()  # the refresh engine loads while the connection opens
        if connection.credentials.method == SparkStreamConnectionMethod.CONNECT:
            if connection.state == ConnectionState.OPEN:
                return connection
            from dbt.adapters.spark_stream.spark_connect import make_handle

            connection.handle = make_handle(connection.credentials)
            connection.state = ConnectionState.OPEN
            return connection
        if connection.credentials.method == SparkConnectionMethod.SESSION:
            # Spark reads PYSPARK_PYTHON once, when the session's context starts, and the
            # engine runs Python UDFs / Arrow conversions in workers: they must run the
            # interpreter that has our packages (the one running dbt), not `python3` on PATH.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            from dbt.adapters.spark_stream.spark_session import quiet_query_context_loggers

            quiet_query_context_loggers()
        return super().open(connection)
