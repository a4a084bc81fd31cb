"""A join needs the other side's old snapshot; when VACUUM removed its files the refresh falls
back to a full one with a warning instead of failing half way or losing changes."""

import pytest
from deltalake import DeltaTable

from tests.support import sources as S

pytestmark = pytest.mark.spark

SQL = "select a.k, count(*) as n, sum(b.v) as total from {src}.a a join {src}.b b on a.k = b.k group by a.k"


def test_vacuumed_old_snapshot_falls_back_to_full(env):
    env.source("a", [S.row(i, k=i % 3, v=i) for i in range(1, 7)])
    env.source("b", [S.row(i, k=i % 3, v=10 * i) for i in range(1, 7)])
    stream = env.stream("joined", SQL)
    stream.refresh(expect="full")

    env.apply([S.Insert("a", [S.row(None, k=1, v=5)]), S.UpdateRows("b", [0, 1, 2, 3, 4, 5], {"v": 1})])
    removed = DeltaTable(env.paths["b"]).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert removed, "the update should have left unreferenced files for VACUUM to remove"

    result = stream.refresh()
    assert result.mode == "full"
    assert "can no longer be read" in result.reason
    stream.check()
    env.apply([S.Insert("b", [S.row(None, k=2, v=7)])])
    stream.refresh(expect="differential")  # and the next refresh is differential again
    stream.check()
