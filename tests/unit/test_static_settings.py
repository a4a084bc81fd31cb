"""A session's connection reads each setting fixed for the application's life once (each read is
a round trip over Spark Connect) and every other setting each time (runtime/connections/spark.py)."""

from __future__ import annotations

from python_helpers.runtime.connections.base import STATIC_SETTINGS
from python_helpers.runtime.connections.spark import SparkConnection


class _Conf:
    def __init__(self, values: dict):
        self.values: dict = dict(values)
        self.asked: list = []

    def get(self, key, default=None):
        self.asked.append(key)
        return self.values.get(key, default)

    def set(self, key, value):
        self.values[key] = value

    def unset(self, key):
        self.values.pop(key, None)


class _ConnectSession:
    """What SparkConnection reads of a Spark Connect session (no `_jvm` on this side)."""

    def __init__(self, values: dict):
        self.conf = _Conf(values)


def test_static_settings_are_read_once_and_others_every_time():
    session = _ConnectSession({"spark.sql.warehouse.dir": "/w", "spark.sql.shuffle.partitions": "4"})
    conn = SparkConnection(session)
    assert conn.kind == "connect"
    for _ in range(3):
        assert conn.conf("spark.sql.warehouse.dir") == "/w"
        assert conn.conf("spark.hadoop.hive.metastore.uris", "") == ""  # unset: the caller's default
        assert conn.conf("spark.hadoop.hive.metastore.uris") is None
        assert conn.conf("spark.sql.shuffle.partitions") == "4"
    assert session.conf.asked.count("spark.sql.warehouse.dir") == 1
    assert session.conf.asked.count("spark.hadoop.hive.metastore.uris") == 1
    assert session.conf.asked.count("spark.sql.shuffle.partitions") == 3  # a runtime setting: read each time
    assert "spark.sql.catalogImplementation" in STATIC_SETTINGS


def test_a_setting_this_connection_sets_is_read_back():
    session = _ConnectSession({"spark.sql.warehouse.dir": "/w"})
    conn = SparkConnection(session)
    assert conn.conf("spark.sql.warehouse.dir") == "/w"
    conn.set_conf("spark.sql.warehouse.dir", "/elsewhere")  # Spark refuses this one; the cache does not keep it
    assert conn.conf("spark.sql.warehouse.dir") == "/elsewhere"
    assert session.conf.asked.count("spark.sql.warehouse.dir") == 2
