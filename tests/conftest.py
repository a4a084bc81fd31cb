"""Shared pytest fixtures.

`spark` is one session-scoped SparkSession for the whole run, created lazily on first use (unit
tests never ask for it, so they never start a JVM). It is built as dbt-spark's `session`
connection would open it, so an in-process dbt run (tests/dbt) reuses it via getOrCreate; it is
stopped only when the whole pytest session ends.
"""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def pytest_configure(config):
    # pytest.ini declares these too; registering here keeps --strict-markers happy either way.
    for line in (
        "spark: needs a local SparkSession (the session-scoped `spark` fixture)",
        "dbt: runs dbt end to end",
        "slow: long-running (bigger hypothesis runs); deselect with -m 'not slow'",
    ):
        config.addinivalue_line("markers", line)


@pytest.fixture(scope="session")
def spark_base_dir(tmp_path_factory):
    """The directory holding the session's warehouse and Derby metastore."""
    return str(tmp_path_factory.mktemp("spark"))


@pytest.fixture(scope="session")
def spark(spark_base_dir):
    from tests.support.spark_session import build_spark_session

    session = build_spark_session(spark_base_dir)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def warehouse(spark):
    """spark.sql.warehouse.dir as a local path."""
    from tests.support.spark_session import warehouse_dir

    return warehouse_dir(spark)


@pytest.fixture
def env(spark, request):
    """A fresh StreamEnv (unique source + stream-table schemas) for one test."""
    from tests.support.harness import StreamEnv

    tag = "".join(ch for ch in request.node.name.lower() if ch.isalnum())[:20] or "t"
    env = StreamEnv(spark, tag=tag)
    yield env
    env.reads.close()
