"""`method: thrift` without `connect_url`: stream tables refreshed through the Thrift server alone.

The refresh gets a Hive session of its own on the profile's server (opened by dbt-spark's own
connection code, so host, port, auth, Kerberos and SSL mean what they mean for dbt-spark), and
talks to Spark in SQL only (python_helpers/runtime/connections/thrift.py). Data crosses through the
storage the dbt process and the cluster share: the warehouse must be readable and writable from
both (docs/deployment.md).
"""

from __future__ import annotations

from dbt.adapters.contracts.connection import Connection
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.spark.connections import SparkConnectionManager, SparkConnectionMethod

from dbt.adapters.spark_stream.messages import first_line
from python_helpers.runtime.connections.thrift import ThriftConnection

logger = AdapterLogger("SparkStream")


def thrift_only(credentials) -> bool:
    """A thrift profile without a Spark Connect endpoint: refreshes go through SQL."""
    return credentials.method == SparkConnectionMethod.THRIFT and not getattr(credentials, "connect_url", None)


def open_engine(credentials) -> ThriftConnection:
    def connect():
        connection = Connection(type=credentials.type, name="stream_table_refresh", credentials=credentials)
        SparkConnectionManager.open(connection)  # dbt-spark's client: its retries and auth
        return connection.handle.handle  # the PyHive connection inside dbt-spark's wrapper

    conn = ThriftConnection(connect, server_key=f"{credentials.host}:{credentials.port}")
    apply_parameters(conn, credentials)
    return conn


def apply_parameters(conn: ThriftConnection, credentials) -> None:
    """The profile's server_side_parameters on the refresh's Hive session, as the session and
    Connect methods set them on theirs: the Spark Thrift server does not apply the settings a
    client sends when it opens a session, and results depend on some of them (ANSI mode, which
    dbt-spark turns off, the time zone). Static settings belong to the server's configuration."""
    for key, value in credentials.server_side_parameters.items():
        try:
            if conn.conf(key) == value:
                continue
            conn.set_conf(key, value)
        except Exception as exc:  # noqa: BLE001 - Spark's error class names the reason
            logger.warning(
                f"spark_stream (method: thrift): server_side_parameters.{key} cannot be set on a session of "
                f"{credentials.host}:{credentials.port}; set it in the Thrift server's configuration instead "
                f"({first_line(exc, 200)})"
            )
