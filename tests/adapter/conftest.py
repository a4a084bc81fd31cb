"""dbt's standard adapter suites (the dbt-tests-adapter package) against `type: spark_stream`.

dbt-tests-adapter's fixtures (imported below) write a dbt project per test class into a tmp
dir, create a schema of its own for that class and drop it afterwards. What they need from us
is the profile target: `method: session` on the warehouse and Derby metastore of the pytest
run's one SparkSession (tests/conftest.py), so dbt's `SparkSession.builder.getOrCreate()` picks
that session up and every suite shares one JVM.
"""

from __future__ import annotations

import pytest

# The fixtures (project, adapter, unique_schema, models, seeds, ...) as plain imports: pytest only
# honours `pytest_plugins` in the top-level conftest, and this directory is not always it.
from dbt.tests.fixtures.project import *  # noqa: F401,F403,E402

# Session settings dbt-spark's session connection changes; put back after each class so the
# Spark tests that run after this directory see the settings they were built with.
TOUCHED_CONF = ("spark.sql.ansi.enabled", "spark.sql.shuffle.partitions", "spark.sql.session.timeZone")


def pytest_configure(config):
    # dbt-tests-adapter's suites define class-scoped fixtures as methods; pytest's deprecation
    # notice for that would repeat for every class.
    config.addinivalue_line(
        "filterwarnings", "ignore:Class-scoped fixtures defined as instance methods:pytest.PytestRemovedIn10Warning"
    )


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    # Every test of this directory is an `adapter` test (-m adapter / -m 'not adapter'); the
    # tests of a file share class-scoped dbt projects, so each file runs on one pytest worker.
    here = str(config.rootpath / "tests" / "adapter")
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.adapter)
            item.add_marker(pytest.mark.xdist_group(f"adapter_{item.path.stem}"))


@pytest.fixture(scope="class")
def dbt_profile_target(spark, warehouse, spark_base_dir):
    # Static settings (warehouse, metastore) are those of the running session; repeating them
    # keeps the profile valid on its own and says where dbt writes.
    return {
        "type": "spark_stream",
        "method": "session",
        "host": "localhost",
        "threads": 2,
        "engine": "auto",
        "server_side_parameters": {
            "spark.sql.warehouse.dir": warehouse,
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.session.timeZone": "UTC",
            "spark.ui.enabled": "false",
        },
    }


@pytest.fixture(scope="class")
def project_config_update():
    # The suites assert differential refreshes; `auto` must not learn from timings that a full
    # refresh is faster (tests/conftest.py says the same for the example projects).
    return {"models": {"+auto_from_history": False}}


@pytest.fixture(scope="class", autouse=True)
def _restore_spark_conf(spark):
    saved = {key: spark.conf.get(key, None) for key in TOUCHED_CONF}
    yield
    for key, value in saved.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)
