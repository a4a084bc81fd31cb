"""What the kill drills share on either Delta engine: drill worker processes (tests/drills/worker.py)
on one long-lived Spark Connect server, the steps a traced refresh reports, and the drill itself:
one process per kill point that first repairs and checks what the previous kill left (the
oracle), then changes the sources and dies at its point.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Optional

from tests.support import rotation

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")


class Drill:
    """Runs worker processes of one drill: its own sources and schemas, on the shared server
    (`engine`: the Delta engine the worker asks for; None leaves it to `auto`)."""

    def __init__(self, work: str, server, prefix: str, engine: Optional[str] = None, models: Optional[list] = None):
        self.work, self.server, self.prefix, self.engine, self.models = work, server, prefix, engine, models

    def args(self, *actions: str, session: bool = False, metastore: str = "metastore") -> list:
        where = (
            ["--metastore", metastore, "--warehouse", self.server.warehouse]
            if session
            else ["--remote", self.server.remote]
        )
        engine = ["--engine", self.engine] if self.engine else []
        models = ["--models", ",".join(self.models)] if self.models else []
        return [sys.executable, WORKER, self.work, *actions, "--prefix", self.prefix, *where, *engine, *models]

    def run(self, *actions: str, session: bool = False, timeout: int = 300):
        proc = subprocess.run(self.args(*actions, session=session), capture_output=True, text=True, timeout=timeout)
        results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"action"')]
        return proc, results


def ok(proc) -> None:
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{proc.stderr[-4000:]}"


def set_up_and_trace(drill: Drill, traces: list) -> list:
    """Create the sources and build the stream tables, then, in the same process (a worker
    process costs a Python and Spark client start), run each list of actions in `traces` with
    its refreshes traced: the steps each list's refreshes reach, in order
    (runtime/refresh/steps.py)."""
    files = [os.path.join(drill.work, f"trace-{i}.txt") for i in range(len(traces))]
    actions = ["setup", "refresh"]
    for file, traced_actions in zip(files, traces):
        actions += [f"trace:{file}", *traced_actions]
    proc, _ = drill.run(*actions, "trace:")
    ok(proc)
    steps = []
    for file in files:
        with open(file) as handle:
            steps.append([line.strip() for line in handle if line.strip()])
        os.remove(file)
    return steps


def kill_points(steps: list, inside: dict) -> list:
    """Each step once, in order; the steps of `inside` also that many seconds after (in the
    middle of the work that follows them)."""
    points = []
    for step in dict.fromkeys(steps):
        points.append(step)
        if step in inside:
            points.append(f"{step}+{inside[step]}")
    return points


def kill_drill(
    drill: Drill,
    inside: dict,
    later_models: list,
    session_points: list,
    label: str,
    differential_trace: tuple = ("change:1", "refresh"),
    points_a_day: int = 0,
) -> None:
    """Kill a refresh at every step it reports (a day's part of them: tests/support/rotation.py),
    at `later_models` points (after the models before them committed) and at `session_points`
    with Spark in the killed process; after each kill a fresh process repairs and checks.
    `differential_trace`: the actions whose steps are the differential refresh's (they must
    reach a vacuum); `points_a_day`: that many of the points a day instead of the rotation's
    share (rotation.todays_few)."""
    differential, full = set_up_and_trace(drill, [list(differential_trace), ["change:2", "full"]])
    assert {"planned", "changes_counted", "merging", "committed", "published", "vacuuming"} <= set(differential), (
        differential
    )
    assert {"computed", "committed", "published"} <= set(full), full
    # The full refresh's steps after its commit are the differential one's: killed once.
    full_only = [step for step in full if step not in differential or step == "committed"]
    plan = [
        (mode, point)
        for mode, steps in (("refresh", differential), ("full", full_only))
        for point in kill_points(steps, inside)
    ] + later_models
    chosen = [(mode, point, False) for mode, point in rotation.todays_few(plan, points_a_day)]
    # A JVM started in the killed process each: on as many days of the rotation as there are points.
    in_session = rotation.todays(session_points, every_day=False)
    chosen += [(mode, point, True) for mode, point in in_session]
    where = rotation.where()
    print(
        f"\n{label} ({where}): {len(chosen) - len(in_session)} of {len(plan)} points over Spark Connect: "
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
    ok(proc)
    assert results[-1]["ok"], results
    died = [k for k in killed if k[3]]
    print(
        f"\n{label}: {len(died)} of {len(killed)} kill points hit a live refresh; "
        f"{checks + 1} checks after them, every one equal to the recompute, offsets caught up, "
        f"{results[-1]['source_views']} source views showing the sources' newest versions row for row"
    )
    assert len(died) >= len(killed) - 2, killed  # "+delay" points may land after the step's work ended
