"""Stream tables against a real local cluster, through each connection method that supports them.

A standalone master and a worker are started from the installed pyspark package
(python_helpers/testing/local_spark.py) on free ports and stopped by process id, with a Spark
Thrift server that also loads the Spark Connect plugin: one application, one catalog, serving
the example project's three targets in turn:
- `connect` (`method: connect`, through the plugin's Connect endpoint);
- `thrift` (`method: thrift`, dbt-spark's PyHive client, with `connect_url` for the stream
  tables' refreshes);
- `thrift_sql` (`method: thrift` alone: the refreshes in SQL over the Thrift protocol, data
  through the shared warehouse).
The stream tables are built once and every target refreshes them in turn: nine of the project's
nineteen, one per kind of refresh whose reads and writes differ by method (an aggregate, a stream
table over a stream table, a keyed result, a join, DISTINCT, UNION ALL, Top-K, an anti join, a
model that falls back to full). Every model of the project runs end to end in-process
(tests/dbt), the recursive one too: on a cluster it was each run's slowest model by far (on
the spark engine's cluster 128 s of a 130 s run whose other models took at most 65 s), for reads
and writes the other models make as well. One more round applies the changes of three of them
the way a stored result of 20 M rows or more gets them (the executors rewrite the touched files;
`DBT_SPARK_STREAM_EXECUTOR_MERGE_ROWS=0`), a method a day.
The integration_tests project runs with threads: 4, each `dbt` command a fresh process, as a
scheduled job runs it: nothing of Spark runs in the dbt process, the executors read the Delta
files the client wrote.

The oracle is the project's `equals_recompute` data tests: each stream table against its SQL
recomputed by the cluster, as a plain view, on the same source versions.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.support import rotation
from tests.support.cluster_project import FULL_ONLY, TARGETS, ClusterProject, assert_modes, local_cluster

# One cluster for the module: its tests run in order on one pytest worker.
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]


# Every target talks to the same Spark application, so they share its catalog and warehouse:
# the stream tables one target built are refreshed by the next, and each method's refreshes
# are checked on the state the others left (as a team whose jobs use different methods would).
# The first build goes through the method whose full refresh differs most from the in-process
# one (the SQL-only binding: results written by the executors as parquet and read back); the
# Spark binding's full refresh runs in every round (larger_orders refreshes in full).
BUILD_TARGET = "thrift_sql"

MODELS = [
    "customer_totals",
    "customer_tiers",
    "order_facts",
    "region_stats",
    "customer_statuses",
    "customer_events",
    "top_customers",
    "lapsed_or_north",
    "larger_orders",
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A cluster application serving the three targets (cluster_project.local_cluster)."""
    work = tmp_path_factory.mktemp("cluster")
    with local_cluster(work) as server:
        yield work, server


@pytest.fixture(scope="module")
def project(cluster, tmp_path_factory):
    work, server = cluster
    return ClusterProject.built(tmp_path_factory.mktemp("dbt_cluster"), work, server, BUILD_TARGET, MODELS)


def test_first_run_builds_every_stream_table(project):
    # no Delta Lake in this cluster's Spark: auto picks the embedded engine
    assert_modes(project.first_run, "full", engine="embedded", models=MODELS)
    project.test(BUILD_TARGET)


# Rounds of source changes and refresh per method (make test-long: two; make test: one).
ROUNDS = int(os.environ.get("DVM_CLUSTER_REFRESH_ROUNDS", "2"))


# Methods refreshed and killed: all three in make test-long; make test takes one of each a day,
# a different one for each (tests/support/rotation.py).
REFRESH_TARGETS = rotation.todays(TARGETS)


@pytest.mark.parametrize("seed", [31, 32][:ROUNDS])
@pytest.mark.parametrize("target", REFRESH_TARGETS)
def test_refresh_is_differential_and_equals_recompute(project, target, seed):
    project.shop_data("mutate", "--seed", f"{seed}{TARGETS.index(target)}")
    refreshes = project.run(target)
    assert_modes(refreshes, "differential", models=MODELS)
    assert refreshes["customer_totals"]["rows_changed"] > 0
    project.test(target)


# An aggregate, a stream table over it, a keyed result: what the executor merge treats apart.
EXECUTOR_MODELS = ["customer_totals", "customer_tiers", "order_facts"]


@pytest.mark.parametrize("target", rotation.todays(TARGETS, offset=2))
def test_refreshes_applied_by_the_executors_equal_recompute(project, target):
    """Changes applied the way a large stored result's are (the executors rewrite the touched
    files, the dbt process commits), here made the rule for all sizes."""
    project.shop_data("mutate", "--seed", f"34{TARGETS.index(target)}")
    env = {**project.env, "DBT_SPARK_STREAM_EXECUTOR_MERGE_ROWS": "0"}
    refreshes = project.run(target, env=env, models=EXECUTOR_MODELS)
    assert_modes(refreshes, "differential", models=EXECUTOR_MODELS)
    for model in ("customer_totals", "order_facts"):
        counters = refreshes[model]["counters"]
        assert refreshes[model]["rows_changed"] > 0, refreshes[model]
        assert counters.get("merged_by_executors") == 1 and counters.get("files_rewritten", 0) > 0, counters
    project.test(target, models=EXECUTOR_MODELS)


# `thrift` refreshes through Connect as `connect` does (only dbt's own statements go over
# Thrift): in rotation, make test kills the two refresh paths in turn.
KILL_TARGETS = list(TARGETS) if rotation.ROTATION == 1 else rotation.todays(("connect", "thrift_sql"), offset=1)
# Five of the models, a run of them killed after two committed: one over another, a keyed
# result, one of the slowest (MIN/MAX over a join: group rescans, 8-10 s; so often caught
# mid-refresh) and the one that always refreshes in full.
KILL_MODELS = ["customer_totals", "customer_tiers", "order_facts", "region_stats", "larger_orders"]


@pytest.mark.parametrize("target", KILL_TARGETS)
def test_a_run_killed_mid_refresh_is_repaired_by_the_next_run(project, target):
    project.shop_data("mutate", "--seed", f"33{TARGETS.index(target)}")
    proc = subprocess.Popen(
        project.command(target, "run", *project.selection(recompute=True, models=KILL_MODELS)),
        env=project.env,
        cwd=project.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    finished = 0
    deadline = time.time() + 600
    assert proc.stdout is not None
    for line in proc.stdout:
        if "OK created sql stream_table" in line:
            finished += 1
        # Some stream tables committed, others mid-refresh on the other threads.
        if finished >= 2 or time.time() > deadline:
            break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert finished >= 2, "the run ended before it could be killed mid-way"
    refreshes = project.run(target, models=KILL_MODELS)
    assert sorted(refreshes) == sorted(KILL_MODELS)
    project.test(target, models=KILL_MODELS)
    # Nothing left to do afterwards: the repaired state is the caught-up state.
    again = project.run(target, models=KILL_MODELS)
    for model, info in again.items():
        if model not in FULL_ONLY:
            assert info["mode"] == "differential" and info["rows_changed"] == 0, f"{model}: {info['message']}"


# One method a day in make test (each dbt command a fresh process that waits on a dead port),
# all three in make test-long.
@pytest.mark.parametrize("target", rotation.todays(TARGETS, offset=1))
def test_an_unreachable_server_fails_fast_naming_the_profile_keys(project, target):
    from python_helpers.testing.local_spark import free_port

    started = time.time()
    if target == "thrift_sql":  # no Connect endpoint: the Thrift server itself is away
        env = {**project.env, "DBT_SPARK_STREAM_THRIFT_PORT": str(free_port())}
        done = project.dbt(target, "run", "--select", "customer_totals", env=env)
        assert done.returncode != 0
        assert "Failed to connect" in done.stdout or "Could not connect" in done.stdout, done.stdout[-3000:]
        assert time.time() - started < 120
        return
    env = {**project.env, "DBT_SPARK_STREAM_CONNECT_URL": f"sc://127.0.0.1:{free_port()}"}
    done = project.dbt(target, "run", "--select", "customer_totals", env=env)
    assert done.returncode != 0
    key = "`host`" if target == "connect" else "`connect_url`"
    assert "cannot reach the Spark Connect server" in done.stdout and key in done.stdout, done.stdout[-3000:]
    assert time.time() - started < 120
