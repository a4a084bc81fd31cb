"""`method: thrift` without `connect_url`: stream tables refreshed through the Thrift server alone.

The refresh gets a Hive session of its own on the profile's server (opened by dbt-spark's own
connection code, so host, port, auth, Kerberos and SSL mean what they mean for dbt-spark), and
talks to Spark in SQL only (python_helpers/runtime/thrift_engine.py). Data crosses through the
storage the dbt process and the cluster share: the warehouse must be readable and writable from
both (docs/deployment.md).
"""

from __future__ import annotations

from dbt.adapters.contracts.connection import Connection
from dbt.adapters.spark.connections import SparkConnectionManager, SparkConnectionMethod

from python_helpers.runtime.thrift_engine import ThriftEngine


def thrift_only(credentials) -> bool:
    """A thrift profile without a Spark Connect endpoint: refreshes go through SQL."""
    return credentials.method == SparkConnectionMethod.THRIFT and not getattr(credentials, "connect_url", None)


def open_engine(credentials) -> ThriftEngine:
    def connect():
        connection = Connection(type=credentials.type, name="stream_table_refresh", credentials=credentials)
        SparkConnectionManager.open(connection)  # dbt-spark's client: its retries and auth
        return connection.handle.handle  # the PyHive connection inside dbt-spark's wrapper

    return ThriftEngine(connect, server_key=f"{credentials.host}:{credentials.port}")
