"""Drills in real processes: a refresh SIGKILLed at every step of its sequence, and two
processes refreshing the same stream tables at once. After each, a fresh process refreshes and
compares every stream table with its recompute (the oracle): no change lost or applied twice.

The processes are clients of one long-lived Spark Connect server (started once for the
module), as a scheduler's dbt jobs are clients of a cluster: a kill is what a scheduler's
timeout does to the refreshing process, and the two racing processes share one metastore. A
few kill points also run with Spark inside the killed process, so its JVM dies with it.

The steps are not listed here: a traced refresh reports the sequence the code goes through
(python_helpers/runtime/refresh/steps.py), and each step is killed in turn, some also a moment after
(inside the MERGE, the publish or the vacuum that follows).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support import rotation

pytestmark = [pytest.mark.drill, pytest.mark.xdist_group("drills")]

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
# Steps whose work takes long enough to be killed in the middle as well.
INSIDE = {"merging": 0.02, "vacuuming": 0.01}
# Kill points are taken in a rotation by the day (tests/support/rotation.py: DVM_ROTATION,
# DVM_DAY): every point runs at least once in DVM_ROTATION consecutive days, make test-long
# kills every point.
# Points also killed with Spark in the killed process (a JVM each): a MERGE in flight and a full
# result computed but not yet written.
SESSION_POINTS = [("refresh", "merging+0.02"), ("full", "computed")]
# Kill points in the second and the last model of a run (the worker refreshes totals, joined,
# rows in that order), after the models before them committed and published: the repairing run
# must redo only what died, and leave offsets, views and source views right for every model.
LATER_MODELS = [
    ("refresh", "merging+0.02@model.drill.joined"),
    ("refresh", "committed@model.drill.joined"),
    ("full", "computed@model.drill.joined"),
    ("refresh", "published@model.drill.rows"),
    ("refresh", "merging+0.02@model.drill.rows"),
    ("full", "committed@model.drill.rows"),
]
# Refresh rounds per process in the race drill (CI runs fewer).
RACE_ROUNDS = int(os.environ.get("DVM_DRILL_RACE_ROUNDS", "8"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One Spark Connect server (local master) for the module's drills."""
    from python_helpers.testing.local_spark import ConnectServer

    work = tmp_path_factory.mktemp("drill_server")
    connect = ConnectServer(str(work / "server"), warehouse=str(work / "warehouse"), memory="1g")
    try:
        connect.start()
        yield connect
    finally:
        connect.stop()


class Drill:
    """Runs worker processes of one drill: its own sources and schemas, on the shared server."""

    def __init__(self, work: str, server, prefix: str):
        self.work, self.server, self.prefix = work, server, prefix

    def args(self, *actions: str, session: bool = False, metastore: str = "metastore") -> list:
        where = (
            ["--metastore", metastore, "--warehouse", self.server.warehouse]
            if session
            else ["--remote", self.server.remote]
        )
        return [sys.executable, WORKER, self.work, *actions, "--prefix", self.prefix, *where]

    def run(self, *actions: str, session: bool = False, env: dict | None = None, timeout: int = 300):
        proc = subprocess.run(
            self.args(*actions, session=session),
            capture_output=True,
            text=True,
            env={**os.environ, **(env or {})},
            timeout=timeout,
        )
        results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"action"')]
        return proc, results


def _ok(proc) -> None:
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{proc.stderr[-4000:]}"


def _traced(drill: Drill, actions: list) -> list:
    trace = os.path.join(drill.work, "trace.txt")
    proc, _ = drill.run(*actions, env={"DBT_SPARK_STREAM_TRACE_STEPS": trace})
    _ok(proc)
    with open(trace) as handle:
        steps = [line.strip() for line in handle if line.strip()]
    os.remove(trace)
    return steps


def _kill_points(steps: list) -> list:
    points = []
    for step in dict.fromkeys(steps):  # in order, once each
        points.append(step)
        if step in INSIDE:
            points.append(f"{step}+{INSIDE[step]}")
    return points


def test_a_refresh_killed_at_every_step_loses_nothing(server, tmp_path):
    drill = Drill(str(tmp_path), server, "kill")
    proc, _ = drill.run("setup", "refresh", "check")
    _ok(proc)
    differential = _traced(drill, ["change:1", "refresh"])
    full = _traced(drill, ["change:2", "full"])
    assert {"planned", "changes_counted", "merging", "committed", "published", "vacuuming"} <= set(differential)
    assert {"computed", "committed", "published"} <= set(full)
    # The full refresh's steps after its commit are the differential one's: killed once.
    full_only = [step for step in full if step not in differential or step == "committed"]
    plan = [
        (mode, point)
        for mode, steps in (("refresh", differential), ("full", full_only))
        for point in _kill_points(steps)
    ] + LATER_MODELS
    chosen = [(mode, point, False) for mode, point in rotation.todays(plan)]
    in_session = rotation.todays(SESSION_POINTS)
    chosen += [(mode, point, True) for mode, point in in_session]
    where = rotation.where()
    print(
        f"\nkill drill ({where}): {len(chosen) - len(in_session)} of {len(plan)} points over Spark Connect: "
        f"{[p[:2] for p in chosen if not p[2]]}; with Spark in the killed process: {in_session}"
    )
    killed, seed, checks = [], 10, 0
    for mode, point, session in chosen:
        seed += 1
        # One process: repair and check what the previous kill left (the oracle), then
        # change the sources and die at this point of the next refresh.
        proc, results = drill.run("check", f"change:{seed}", f"kill:{point}", mode, session=session)
        assert results and results[0]["action"] == "check" and results[0]["ok"], (
            f"after the kill at {killed[-1] if killed else None}, before {mode} {point} ({where})",
            proc.stderr[-3000:],
        )
        checks += 1
        killed.append((mode, point, session, proc.returncode == -9))
    proc, results = drill.run("check")
    _ok(proc)
    assert results[-1]["ok"], results
    died = [k for k in killed if k[3]]
    print(
        f"\nkill drill: {len(died)} of {len(killed)} kill points hit a live refresh; "
        f"{checks + 1} checks after them, every one equal to the recompute, offsets caught up, "
        f"{results[-1]['source_views']} source views showing the sources' newest versions row for row"
    )
    assert len(died) >= len(killed) - 2, killed  # "+delay" points may land after the step's work ended


# What the two processes race (a rotation by the day, like the kill points): differential
# refreshes, full refreshes (two overwrites), offsets-only commits (a change no query reads) and
# a refresh against a process rewriting the stored results (OPTIMIZE) all the while.
RACE_KINDS = ["differential", "full", "offsets", "compact"]


def test_two_processes_refreshing_the_same_stream_tables(server, tmp_path):
    """Two processes on one metastore (the server's) refresh the same stream tables at the same
    moments, round after round: commits conflict, the losers start over, nothing is lost."""
    drill = Drill(str(tmp_path), server, "race")
    proc, _ = drill.run("setup", "refresh")
    _ok(proc)
    kinds = rotation.todays(RACE_KINDS)
    rounds = max(2, RACE_ROUNDS // len(kinds))
    for kind in kinds:
        barrier = tmp_path / f"barrier-{kind}"
        barrier.mkdir()
        for i in range(2):
            (barrier / f"member-{i + 1}").touch()
        procs = [
            subprocess.Popen(
                drill.args(f"loop:{rounds}:{i + 1}:{kind}", "--barrier", str(barrier)),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            for i in range(2)
        ]
        outputs = [p.communicate(timeout=900) for p in procs]
        summary = []
        for p, (out, err) in zip(procs, outputs):
            assert p.returncode == 0, err[-4000:]
            summary += [json.loads(line) for line in out.splitlines() if line.startswith('{"action"')]
        proc, results = drill.run("check")
        _ok(proc)
        assert results[-1]["ok"]
        refreshes = sum(s["refreshes"] for s in summary)
        retries, gave_up = sum(s["retries"] for s in summary), sum(s["gave_up"] for s in summary)
        rewrites, rewrites_lost = sum(s["rewrites"] for s in summary), sum(s["rewrites_lost"] for s in summary)
        print(
            f"\nrace drill ({kind}, {rotation.where()}): {refreshes} rounds in two processes on one metastore, "
            f"{retries} commits lost a race and started over, {gave_up} gave up"
            + (f", {rewrites} OPTIMIZE rewrites beside them ({rewrites_lost} lost)" if kind == "compact" else "")
            + "; final check equal"
        )
        assert refreshes + gave_up == 2 * rounds
        if kind == "compact":
            assert rewrites > 0, "the stored results were never rewritten during the refreshes"
            assert retries + gave_up + rewrites_lost > 0, "the rewrites and the refreshes never conflicted"
        else:
            assert retries + gave_up > 0, "the two processes never conflicted: the drill raced nothing"
