"""The spark Delta engine against a real Spark with Delta Lake.

Delta Lake is loaded into a Spark Connect server started once for the directory (local master,
the jars `make jars` fetched, Delta's SQL extension and catalog): the pytest process keeps its
own Spark without Delta for the embedded suites, and a Spark cannot load Delta after it started.
The tests are clients of that server, as dbt's `method: connect` is; every test here runs on one
pytest worker (one server).
"""

from __future__ import annotations

import os

import pytest

from python_helpers.testing import delta_lake


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.xdist_group("spark_engine"))


@pytest.fixture(scope="session")
def delta_server(tmp_path_factory):
    from python_helpers.testing.local_spark import ConnectServer

    missing = delta_lake.missing()
    if missing:
        pytest.fail(f"the spark engine's tests need Delta Lake's jars: {missing}")
    work = tmp_path_factory.mktemp("delta_server")
    conf = {**delta_lake.spark_conf(), "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"}
    server = ConnectServer(str(work / "server"), warehouse=str(work / "warehouse"), memory="2g", extra_conf=conf)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def delta_spark(delta_server):
    """A Spark Connect session to the server (made with the Connect client's own builder, so the
    process's classic Spark is not switched to Connect mode)."""
    from pyspark.sql.connect.session import SparkSession

    session = SparkSession.builder.remote(delta_server.remote).create()
    yield session
    session.stop()


@pytest.fixture
def delta_env(delta_spark, request):
    from tests.support.harness import StreamEnv

    tag = "".join(ch for ch in request.node.name.lower() if ch.isalnum())[:20] or "t"
    env = StreamEnv(delta_spark, tag=tag)
    yield env
    env.reads.close()
