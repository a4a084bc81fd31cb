"""The spark engine on a real local cluster with Delta Lake: a standalone master and worker, and a
Spark Thrift server with the Connect plugin and Delta Lake loaded (the jars `make jars` fetched,
on the class path; the two settings), serving the example project's three targets (connect,
thrift, thrift_sql), as a cluster with Delta Lake (EMR, self-managed Spark with delta-spark)
serves a team.

The profile says `engine: auto`: it must pick the spark engine here (the session has Delta
Lake), and every stored result is then a Delta table in the catalog that the executors wrote.
The first build goes over the Thrift server alone (every Delta statement as SQL text over the
HiveServer2 protocol); the refreshes over a method of the day, on the state the build left.
The oracle is the project's `equals_recompute` data tests, as in test_cluster_methods.py.

Five of the project's stream tables, one per kind of refresh the engine does differently (an
aggregate, a stream table over a stream table, a keyed result, a join, a model that falls back
to full): every shape's SQL on the spark engine is covered by tests/spark_engine (a recursion
there too: the project's recursive model was this suite's slowest refresh by twice, 128 s of a
159 s round, for what the in-process shapes check); what this suite adds is the cluster and the
three methods. In make test (2026-11-28, beside the other worker) its set-up took 106 s and
its round over `thrift_sql` 110 s; with the recursive model they took 140 s and 204 s.
"""

from __future__ import annotations

import pytest

from python_helpers.testing import delta_lake
from tests.support import rotation
from tests.support.cluster_project import TARGETS, ClusterProject, assert_modes, local_cluster

# Its own cluster and pytest worker group: it runs beside test_cluster_methods.py's.
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster_delta")]

MODELS = ["customer_totals", "customer_tiers", "order_facts", "region_stats", "larger_orders"]


@pytest.fixture(scope="module")
def delta_cluster(tmp_path_factory):
    missing = delta_lake.missing()
    if missing:
        pytest.fail(f"the spark engine's cluster tests need Delta Lake's jars: {missing}")
    work = tmp_path_factory.mktemp("delta_cluster")
    with local_cluster(work, extra_conf=delta_lake.server_conf()) as server:
        yield work, server


@pytest.fixture(scope="module")
def project(delta_cluster, tmp_path_factory):
    work, server = delta_cluster
    return ClusterProject.built(tmp_path_factory.mktemp("dbt_delta_cluster"), work, server, "thrift_sql", MODELS)


@pytest.fixture(scope="module")
def catalog(delta_cluster):
    """A Spark Connect session to the cluster's server, to look at what dbt left in its catalog."""
    from pyspark.sql.connect.session import SparkSession

    _, server = delta_cluster
    session = SparkSession.builder.remote(server.remote).create()
    yield session
    session.stop()


def test_auto_picks_the_spark_engine_and_builds_delta_tables_over_thrift_alone(project, catalog):
    assert_modes(project.first_run, "full", engine="spark", models=MODELS)
    for name in MODELS:
        detail = catalog.sql(f"DESCRIBE DETAIL analytics.__dvm_stored__{name}").collect()[0].asDict()
        assert detail["format"] == "delta", (name, detail)
        properties = detail["properties"] or {}
        assert properties.get("delta.enableChangeDataFeed") == "true", (name, properties)
        # the model's name is the plain view over it
        assert catalog.sql(f"SELECT COUNT(*) FROM analytics.{name}").collect()[0][0] >= 0


# make test refreshes over one method a day (test-long: each in turn, on the state the last left).
REFRESH_TARGETS = rotation.todays(TARGETS, offset=2)


@pytest.mark.parametrize("target", REFRESH_TARGETS)
def test_refresh_on_the_spark_engine_is_differential_and_equals_recompute(project, target):
    project.shop_data("mutate", "--seed", f"41{TARGETS.index(target)}")
    refreshes = project.run(target)
    # differential on the state another method built: nothing about the method is in the state
    assert_modes(refreshes, "differential", engine="spark", models=MODELS)
    assert refreshes["customer_totals"]["rows_changed"] > 0
    project.test(target)
