"""Stream tables over Spark Connect, against a real local cluster.

A standalone master, a worker and a Spark Connect server are started from the installed pyspark
package (python_helpers/testing/local_spark.py) on free ports and stopped by process id. The
integration_tests project runs against them with its `connect` target (`method: connect`,
threads: 4), each `dbt` command a fresh process, as a scheduled job runs it: nothing of Spark
runs in the dbt process, the executors read the Delta files the client wrote.

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

ROOT = Path(__file__).resolve().parents[2]
PROJECT_SRC = ROOT / "integration_tests"
sys.path.insert(0, str(PROJECT_SRC / "scripts"))

import run_results  # noqa: E402

pytestmark = pytest.mark.cluster

STREAM_TABLES = sorted(p.stem for p in (PROJECT_SRC / "models" / "stream").glob("*.sql"))
FULL_ONLY = {"larger_orders"}  # auto falls back to full (non-equality correlation)
DBT = [sys.executable, "-c", "from dbt.cli.main import cli; cli()"]


class ConnectProject:
    def __init__(self, path: Path, env: dict):
        self.path, self.env = path, env

    def dbt(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([*DBT, *args, "--target", "connect", "--project-dir", str(self.path),
                               "--profiles-dir", str(self.path)],
                              env=env or self.env, cwd=self.path, capture_output=True, text=True, timeout=900)

    def run(self, *args: str) -> dict:
        done = self.dbt("run", *args)
        refreshes = run_results.refreshes(run_results.load(self.path))
        failed = {m: r["message"] for m, r in refreshes.items() if r["status"] != "success"}
        assert done.returncode == 0 and not failed, f"dbt run failed: {failed}\n{done.stdout[-4000:]}"
        return refreshes

    def test(self) -> None:
        done = self.dbt("test")
        assert done.returncode == 0, f"dbt test failed:\n{done.stdout[-4000:]}"
        results = run_results.load(self.path)["results"]
        bad = [f"{r['unique_id']}: {r['status']} {r.get('message')}" for r in results if r["status"] != "pass"]
        assert len(results) >= len(STREAM_TABLES) and not bad, bad

    def shop_data(self, *args: str) -> None:
        subprocess.run([sys.executable, str(self.path / "scripts" / "shop_data.py"), *args], env=self.env,
                       check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from python_helpers.testing.local_spark import ConnectServer

    work = tmp_path_factory.mktemp("cluster")
    server = ConnectServer(str(work / "server"), warehouse=str(work / "warehouse"), memory="1g", cluster=True,
                           cores=2)
    try:
        server.start()
        yield work, server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def project(cluster, tmp_path_factory):
    work, server = cluster
    path = tmp_path_factory.mktemp("dbt_connect") / "integration_tests"
    shutil.copytree(PROJECT_SRC, path, ignore=shutil.ignore_patterns("target", "logs", "__pycache__"))
    env = {**os.environ, "DBT_SPARK_STREAM_WORK_DIR": str(work), "DBT_SPARK_STREAM_CONNECT_URL": server.remote,
           "DBT_SPARK_STREAM_THREADS": "4", "DBT_SPARK_STREAM_ENGINE": "auto",
           "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
    env.pop("SPARK_REMOTE", None)
    proj = ConnectProject(path, env)
    proj.shop_data("create", "--force")
    proj.first_run = proj.run()
    return proj


def _assert_modes(refreshes: dict, expected: str) -> None:
    assert sorted(refreshes) == STREAM_TABLES
    for model, info in refreshes.items():
        want = "full" if model in FULL_ONLY else expected
        assert info["mode"] == want, f"{model}: {info['mode']} refresh, expected {want} ({info['message']})"


def test_first_run_over_connect_builds_every_stream_table(project):
    _assert_modes(project.first_run, "full")
    project.test()


@pytest.mark.parametrize("seed", [31, 32])
def test_refresh_over_connect_is_differential_and_equals_recompute(project, seed):
    project.shop_data("mutate", "--seed", str(seed))
    refreshes = project.run()
    _assert_modes(refreshes, "differential")
    assert refreshes["customer_totals"]["rows_changed"] > 0
    project.test()


def test_a_run_killed_mid_refresh_is_repaired_by_the_next_run(project):
    project.shop_data("mutate", "--seed", "33")
    proc = subprocess.Popen([*DBT, "run", "--target", "connect", "--project-dir", str(project.path),
                             "--profiles-dir", str(project.path)], env=project.env, cwd=project.path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
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
    refreshes = project.run()
    assert sorted(refreshes) == STREAM_TABLES
    project.test()
    # Nothing left to do afterwards: the repaired state is the caught-up state.
    again = project.run()
    for model, info in again.items():
        if model not in FULL_ONLY:
            assert info["mode"] == "differential" and info["rows_changed"] == 0, f"{model}: {info['message']}"


def test_an_unreachable_server_fails_fast_naming_the_profile_keys(project, tmp_path):
    from python_helpers.testing.local_spark import free_port

    env = {**project.env, "DBT_SPARK_STREAM_CONNECT_URL": f"sc://127.0.0.1:{free_port()}"}
    started = time.time()
    done = project.dbt("run", "--select", "customer_totals", env=env)
    assert done.returncode != 0
    assert "cannot reach the Spark Connect server" in done.stdout and "`host`" in done.stdout, done.stdout[-3000:]
    assert time.time() - started < 120
