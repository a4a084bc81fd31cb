"""The kill drill on `engine: spark`: a refresh SIGKILLed at every step it reports, as
tests/drills does on the embedded engine, with the stream tables as Delta tables in the
catalog written by Delta Lake's own SQL (CREATE OR REPLACE TABLE, MERGE INTO).

What differs from the embedded engine, and why it needs its own drill: over Spark Connect a
killed client's statement is not killed with it. A MERGE or a CREATE OR REPLACE sent before
the kill runs on in the server and may commit after the process died, beside the repairing
process's own refresh: its offsets travel in the same commit (`userMetadata`), and Delta's
idempotent application transaction (`txnAppId`/`txnVersion`) makes the later of two writers of
one stored version a no-op that the refresh notices and starts over from. With Spark in the
killed process the MERGE dies half written instead: files without a commit.

The workers are clients of the directory's Delta Lake server (conftest.py); the points are a
day's part of them (tests/support/rotation.py; DVM_SPARK_KILL_POINTS=2: two a day, and under a
rotation each point with Spark in the process on one day of it). Cost here: 212–221 s with two
points a day, 591 s with a third of the points (7); make test-long (all 17 points) not measured.
"""

from __future__ import annotations

import os

import pytest

from tests.drills.harness import Drill, kill_drill

# make test-long only for now: in the one CI-like run with it in make test, the pytest worker that
# ran it could not start its own local Spark minutes later (JAVA_GATEWAY_EXITED, no JVM
# output) while the other worker started the Delta cluster; not reproduced alone (the drill, then
# that session: both passed). Until that is understood it stays out of make test's budget.
pytestmark = [pytest.mark.spark, pytest.mark.drill, pytest.mark.slow]

# A Delta MERGE or CREATE OR REPLACE takes a second or more here: a kill that long after the
# step lands while the server runs it (after the session settings of the commit were set).
INSIDE = {"merging": 1.0, "computed": 1.0, "vacuuming": 0.5}
# One of the drill's stream tables, the aggregate (its stored rows inserted, updated and deleted
# by the MERGE): a refresh here costs ~10 s a model. Which model of a run dies is the refresh
# loop's business, the same on both engines (tests/drills kills later models).
MODELS = ["totals"]
# Kill points a day (2: every point within 8 days; unset: the rotation's share, DVM_ROTATION).
POINTS_A_DAY = int(os.environ.get("DVM_SPARK_KILL_POINTS", "0"))
# With Spark in the killed process (its JVM dies with it): a MERGE and a table replace half done.
SESSION_POINTS = [("refresh", "merging+1.0"), ("full", "computed+1.0")]


def test_a_refresh_on_the_spark_engine_killed_at_every_step_loses_nothing(delta_server, tmp_path):
    drill = Drill(str(tmp_path), delta_server, "sk", engine="spark", models=MODELS)
    # Two refreshes: this engine vacuums at even versions of the stored result (VACUUM_EVERY=2).
    trace = ("change:1", "refresh", "change:3", "refresh")
    kill_drill(
        drill,
        INSIDE,
        [],
        SESSION_POINTS,
        f"spark engine kill drill (DVM_SPARK_KILL_POINTS={POINTS_A_DAY})",
        trace,
        POINTS_A_DAY,
    )
