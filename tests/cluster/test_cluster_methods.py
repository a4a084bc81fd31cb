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
The stream tables are built once and every target refreshes them in turn.
The integration_tests project runs with threads: 4, each `dbt` command a fresh process, as a
scheduled job runs it: nothing of Spark runs in the dbt process, the executors read the Delta
files the client wrote.

The oracle is the project's `equals_recompute` data tests: each stream table against its SQL
recomputed by the cluster, as a plain view, on the same source versions.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from python_helpers.testing import run_results
from tests.support import rotation

ROOT = Path(__file__).resolve().parents[2]
PROJECT_SRC = ROOT / "integration_tests"

# One cluster for the module: its tests run in order on one pytest worker.
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]

STREAM_TABLES = sorted(p.stem for p in (PROJECT_SRC / "models" / "stream").glob("*.sql"))
FULL_ONLY = {"larger_orders"}  # auto falls back to full (non-equality correlation)
DBT = [sys.executable, "-c", "from dbt.cli.main import cli; cli()"]


class ClusterProject:
    def __init__(self, path: Path, env: dict):
        self.path, self.env = path, env

    def command(self, target: str, *args: str) -> list:
        return [*DBT, *args, "--target", target, "--project-dir", str(self.path), "--profiles-dir", str(self.path)]

    def dbt(self, target: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.command(target, *args),
            env=env or self.env,
            cwd=self.path,
            capture_output=True,
            text=True,
            timeout=900,
        )

    def run(self, target: str, *args: str) -> dict:
        done = self.dbt(target, "run", *args)
        refreshes = run_results.refreshes(run_results.load(self.path))
        failed = {m: r["message"] for m, r in refreshes.items() if r["status"] != "success"}
        assert done.returncode == 0 and not failed, f"dbt run failed: {failed}\n{done.stdout[-4000:]}"
        return refreshes

    def test(self, target: str) -> None:
        done = self.dbt(target, "test")
        assert done.returncode == 0, f"dbt test failed:\n{done.stdout[-4000:]}"
        results = run_results.load(self.path)["results"]
        bad = [f"{r['unique_id']}: {r['status']} {r.get('message')}" for r in results if r["status"] != "pass"]
        assert len(results) >= len(STREAM_TABLES) and not bad, bad

    def shop_data(self, *args: str) -> None:
        subprocess.run(
            [sys.executable, str(self.path / "scripts" / "shop_data.py"), *args],
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        )


# Every target talks to the same Spark application, so they share its catalog and warehouse:
# the stream tables one target built are refreshed by the next, and each method's refreshes
# are checked on the state the others left (as a team whose jobs use different methods would).
TARGETS = ("connect", "thrift", "thrift_sql")
# The first build goes through the method whose full refresh differs most from the in-process
# one (the SQL-only binding: results written by the executors as parquet and read back); the
# Spark binding's full refresh runs in every round (larger_orders refreshes in full).
BUILD_TARGET = "thrift_sql"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A standalone master and worker with a Spark Thrift server that also loads the Connect
    plugin: one application serves the three targets."""
    from python_helpers.testing.local_spark import ConnectServer

    work = tmp_path_factory.mktemp("cluster")
    server = ConnectServer(
        str(work / "server"), warehouse=str(work / "warehouse"), memory="1g", cluster=True, cores=2, thrift=True
    )
    try:
        server.start()
        yield work, server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def project(cluster, tmp_path_factory):
    work, server = cluster
    path = tmp_path_factory.mktemp("dbt_cluster") / "integration_tests"
    shutil.copytree(PROJECT_SRC, path, ignore=shutil.ignore_patterns("target", "logs", "__pycache__"))
    env = {
        **os.environ,
        "DBT_SPARK_STREAM_WORK_DIR": str(work),
        "DBT_SPARK_STREAM_CONNECT_URL": server.remote,
        "DBT_SPARK_STREAM_THREADS": "4",
        "DBT_SPARK_STREAM_ENGINE": "auto",
        "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
        "DBT_SPARK_STREAM_THRIFT_PORT": str(server.thrift_port or 0),
    }
    env.pop("SPARK_REMOTE", None)
    proj = ClusterProject(path, env)
    proj.shop_data("create", "--force")
    proj.first_run = proj.run(BUILD_TARGET)
    return proj


def _assert_modes(refreshes: dict, expected: str) -> None:
    assert sorted(refreshes) == STREAM_TABLES
    for model, info in refreshes.items():
        want = "full" if model in FULL_ONLY else expected
        assert info["mode"] == want, f"{model}: {info['mode']} refresh, expected {want} ({info['message']})"


def test_first_run_builds_every_stream_table(project):
    _assert_modes(project.first_run, "full")
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
    _assert_modes(refreshes, "differential")
    assert refreshes["customer_totals"]["rows_changed"] > 0
    project.test(target)


# `thrift` refreshes through Connect as `connect` does (only dbt's own statements go over
# Thrift): in rotation, make test kills the two refresh paths in turn.
KILL_TARGETS = list(TARGETS) if rotation.ROTATION == 1 else rotation.todays(("connect", "thrift_sql"), offset=1)


@pytest.mark.parametrize("target", KILL_TARGETS)
def test_a_run_killed_mid_refresh_is_repaired_by_the_next_run(project, target):
    project.shop_data("mutate", "--seed", f"33{TARGETS.index(target)}")
    proc = subprocess.Popen(
        project.command(target, "run"),
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
        if finished >= 3 or time.time() > deadline:
            break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert finished >= 3, "the run ended before it could be killed mid-way"
    refreshes = project.run(target)
    assert sorted(refreshes) == STREAM_TABLES
    project.test(target)
    # Nothing left to do afterwards: the repaired state is the caught-up state.
    again = project.run(target)
    for model, info in again.items():
        if model not in FULL_ONLY:
            assert info["mode"] == "differential" and info["rows_changed"] == 0, f"{model}: {info['message']}"


@pytest.mark.parametrize("target", TARGETS)
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
