"""The example project (integration_tests) against a real local cluster: a copy of it whose dbt
commands each run in a fresh process, as a scheduled job runs them (tests/cluster)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Optional

from python_helpers.testing import run_results
from tests.support import rotation

ROOT = Path(__file__).resolve().parents[2]
PROJECT_SRC = ROOT / "integration_tests"
STREAM_TABLES = sorted(p.stem for p in (PROJECT_SRC / "models" / "stream").glob("*.sql"))
# auto refreshes these in full after a source change: a subquery correlated by a non-equality
# (larger_orders), a window without PARTITION BY over the changed source (spend_rank), a scalar
# subquery over it (status_share)
FULL_ONLY = {"larger_orders", "spend_rank", "status_share"}
DBT = [sys.executable, "-c", "from dbt.cli.main import cli; cli()"]


TARGETS = ("connect", "thrift", "thrift_sql")

# The two cluster suites each start a cluster of their own (a master, a worker and a server: three
# JVMs on two cores, slowing every other item while they run). make test takes one of them a day
# in turn (every day one, each within two days); make test-long both (tests/cluster/conftest.py).
SUITES = ("test_cluster_methods.py", "test_cluster_delta.py")


def todays_suites() -> list:
    return rotation.todays(SUITES)


@contextlib.contextmanager
def local_cluster(work: Path, extra_conf: Optional[dict] = None) -> Iterator:
    """A standalone master and worker with a Spark Thrift server that also loads the Connect
    plugin (one application serves the three targets), under `work`; stopped at the end."""
    from python_helpers.testing.local_spark import ConnectServer

    server = ConnectServer(
        str(work / "server"),
        warehouse=str(work / "warehouse"),
        memory="1g",
        cluster=True,
        cores=2,
        thrift=True,
        extra_conf=extra_conf,
    )
    try:
        server.start()
        yield server
    finally:
        server.stop()


class ClusterProject:
    def __init__(self, path: Path, env: dict, models: Optional[list] = None):
        self.path, self.env = path, env
        # The stream tables this project's runs and tests select (None: the whole project).
        self.models = sorted(models) if models else None
        self.first_run: dict = {}

    @classmethod
    def copied(cls, where: Path, work: Path, server, engine: str, models: Optional[list] = None) -> "ClusterProject":
        """A copy of the example project under `where`, its profile pointed at `server` (a
        ConnectServer with thrift=True), its sources under `work`, the profile's `engine`;
        `models`: the stream tables its runs select (with their recompute views), None: all."""
        path = where / "integration_tests"
        shutil.copytree(PROJECT_SRC, path, ignore=shutil.ignore_patterns("target", "logs", "__pycache__"))
        env = {
            **os.environ,
            "DBT_SPARK_STREAM_WORK_DIR": str(work),
            "DBT_SPARK_STREAM_CONNECT_URL": server.remote,
            "DBT_SPARK_STREAM_THREADS": "4",
            "DBT_SPARK_STREAM_ENGINE": engine,
            "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
            "DBT_SPARK_STREAM_THRIFT_PORT": str(server.thrift_port or 0),
        }
        env.pop("SPARK_REMOTE", None)
        return cls(path, env, models)

    @classmethod
    def built(cls, where: Path, work: Path, server, target: str, models: Optional[list] = None) -> "ClusterProject":
        """copied() with engine: auto, the shop data created and a first `dbt run` over `target`
        (its refreshes in `first_run`)."""
        proj = cls.copied(where, work, server, engine="auto", models=models)
        proj.shop_data("create", "--force")
        proj.first_run = proj.run(target)
        return proj

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

    @property
    def stream_tables(self) -> list:
        return self.models or STREAM_TABLES

    def selection(self, *, recompute: bool, models: Optional[list] = None) -> list:
        """dbt's --select for the chosen models (and their recompute views), [] for all;
        `models` narrows the project's choice for one command."""
        models = models or self.models
        if models is None:
            return []
        names = [*models, *([f"{m}_recompute" for m in models] if recompute else [])]
        return ["--select", *names]

    def run(self, target: str, *args: str, env: dict | None = None, models: Optional[list] = None) -> dict:
        done = self.dbt(target, "run", *self.selection(recompute=True, models=models), *args, env=env)
        refreshes = run_results.refreshes(run_results.load(self.path))
        failed = {m: r["message"] for m, r in refreshes.items() if r["status"] != "success"}
        assert done.returncode == 0 and not failed, f"dbt run failed: {failed}\n{done.stdout[-4000:]}"
        return refreshes

    def test(self, target: str, models: Optional[list] = None) -> None:
        done = self.dbt(target, "test", *self.selection(recompute=False, models=models))
        assert done.returncode == 0, f"dbt test failed:\n{done.stdout[-4000:]}"
        # Without the project's on-run-start hook (the demo's warm-up, empty here: "success").
        results = [r for r in run_results.load(self.path)["results"] if not run_results.is_hook(r["unique_id"])]
        bad = [f"{r['unique_id']}: {r['status']} {r.get('message')}" for r in results if r["status"] != "pass"]
        assert len(results) >= len(models or self.stream_tables) and not bad, bad

    def shop_data(self, *args: str) -> None:
        subprocess.run(
            [sys.executable, str(self.path / "scripts" / "shop_data.py"), *args],
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        )


def assert_modes(refreshes: dict, expected: str, engine: str | None = None, models: Optional[list] = None) -> None:
    """Every stream table (of `models`, None: all) refreshed, in `expected` mode (FULL_ONLY ones
    in full), by `engine`."""
    assert sorted(refreshes) == (sorted(models) if models else STREAM_TABLES)
    for model, info in refreshes.items():
        want = "full" if model in FULL_ONLY else expected
        assert info["mode"] == want, f"{model}: {info['mode']} refresh, expected {want} ({info['message']})"
        if engine is not None:
            assert info["engine"] == engine, f"{model}: refreshed by the {info['engine']} engine, not {engine}"
