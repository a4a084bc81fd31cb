"""Shared pytest fixtures.

`spark` is one session-scoped SparkSession for the whole run, created lazily on first use (unit
tests never ask for it, so they never start a JVM). It is built as dbt-spark's `session`
connection would open it, so an in-process dbt run (tests/dbt) reuses it via getOrCreate; it is
stopped only when the whole pytest session ends.
"""

from __future__ import annotations

import datetime
import os
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def pytest_configure(config):
    # The markers are declared in pytest.ini (--strict-markers).
    global _CONFIG
    _CONFIG = config
    # The day of the rotation (tests/support/rotation.py), fixed before pytest-xdist starts its
    # workers: they must collect the same parametrized items, also across midnight.
    os.environ.setdefault("DVM_DAY", str(datetime.date.today().toordinal()))
    os.environ.setdefault("DVM_TURN", str(int(time.time() // 3600)))
    # The test projects' stream tables (integration_tests/, tests/dbt/features_project/) read
    # it as their auto_from_history config: the suites assert differential refreshes, which
    # `auto` would otherwise give up where its own timings found a full refresh faster.
    os.environ.setdefault("DBT_SPARK_STREAM_AUTO_FROM_HISTORY", "False")
    # The example project's recursion refreshes in full under `auto` (its step reads the changed
    # source); pinned, the suites keep its delta under dbt.
    os.environ.setdefault("DBT_SPARK_STREAM_CHAINS_REFRESH_MODE", "differential")


def pytest_report_header(config):
    from tests.support import rotation
    from tests.support.cluster_project import todays_suites

    return f"tests/cluster today: {', '.join(todays_suites())} ({rotation.where()}); this run: {rotation.share_line()}"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """With DVM_SHARE=n: the every_run tests and an n-th of the others (tests/support/rotation.py:
    `share_unit` decides what runs every time and what takes its turn together), the rest
    deselected (not skipped: they are not counted as passed)."""
    from tests.support import rotation

    # Tests named on the command line (an id or -k) run whatever the hour.
    named = config.option.keyword or any("::" in str(arg) for arg in config.args)
    if rotation.SHARE == 1 or named:
        return

    def unit(item):
        return rotation.share_unit(
            os.path.relpath(str(item.path), ROOT),
            item.cls.__name__ if item.cls is not None else None,
            item.name,
            item.get_closest_marker("every_run") is not None,
            item.get_closest_marker("share_module") is not None,
        )

    kept, left = rotation.split(items, unit)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept


_CONFIG = None
_STARTED = time.monotonic()
# Tests at least this long are named as they end, with the minutes since the run started: CI
# shows only part of a run's output, and a run stopped at its time limit prints no --durations.
SLOW_LINE_SECONDS = 20


def pytest_runtest_logreport(report):
    config = _CONFIG
    if config is None or hasattr(config, "workerinput") or report.duration < SLOW_LINE_SECONDS:
        return
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is None:
        return
    minutes, seconds = divmod(int(time.monotonic() - _STARTED), 60)
    node = getattr(report, "node", None)
    worker = f" ({node.gateway.id})" if node is not None else ""
    terminal.write_line(
        f"[{minutes:3d}:{seconds:02d}] {report.duration:6.1f} s {report.when:8} {report.nodeid}{worker}"
    )


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
