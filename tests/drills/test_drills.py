"""Drills in real processes: a refresh SIGKILLed at every step of its sequence, and two
processes refreshing the same stream tables at once. After each, a fresh process refreshes and
compares every stream table with its recompute (the oracle): no change lost or applied twice.

The processes are clients of one long-lived Spark Connect server (started once for the
module), as a scheduler's dbt jobs are clients of a cluster: a kill is what a scheduler's
timeout does to the refreshing process, and the two racing processes share one metastore. Two
kill points also run with Spark inside the killed process, so its JVM dies with it (under make
test's rotation, each on one day of six).

The steps are not listed here: a traced refresh reports the sequence the code goes through
(python_helpers/runtime/refresh/steps.py), and each step is killed in turn, some also a moment after
(inside the MERGE, the publish or the vacuum that follows).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.drills.harness import Drill, kill_drill, ok
from tests.support import rotation

pytestmark = [pytest.mark.drill, pytest.mark.xdist_group("drills")]

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
# Kill points a day over Spark Connect (0: the rotation's share; make test takes 2 of the 24,
# about 14 s each alone, 50 s beside the other pytest worker: every point within twelve days).
KILL_POINTS = int(os.environ.get("DVM_DRILL_KILL_POINTS", "0"))


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


def test_a_refresh_killed_at_every_step_loses_nothing(server, tmp_path):
    kill_drill(
        Drill(str(tmp_path), server, "kill"),
        INSIDE,
        LATER_MODELS,
        SESSION_POINTS,
        "kill drill",
        points_a_day=KILL_POINTS,
    )


# What the two processes race (a rotation by the day, like the kill points): differential
# refreshes, full refreshes (two overwrites), offsets-only commits (a change no query reads) and
# a refresh against a process rewriting the stored results (OPTIMIZE) all the while.
RACE_KINDS = ["differential", "full", "offsets", "compact"]


def test_two_processes_refreshing_the_same_stream_tables(server, tmp_path):
    """Two processes on one metastore (the server's) refresh the same stream tables at the same
    moments, round after round: commits conflict, the losers start over, nothing is lost."""
    drill = Drill(str(tmp_path), server, "race")
    proc, _ = drill.run("setup", "refresh")
    ok(proc)
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
        ok(proc)
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
