"""Array-valued aggregates (group rescan) MERGE into the stored result; delta-rs needs the MERGE
source cast to the stored types, nested nullability included (it panicked otherwise)."""

import pytest

from tests.support import sources as S

pytestmark = pytest.mark.spark

SQL = (
    "select k, sort_array(collect_set(g)) as gs, sort_array(collect_list(v)) as vs, "
    "percentile(v, 0.5) as med from {src}.t group by k"
)


def test_array_aggregates_refresh_differentially(env):
    env.source("t", [S.row(1, k=1, g="a", v=1), S.row(2, k=1, g=None, v=2), S.row(3, k=2, g="b", v=None)])
    stream = env.stream("arrays", SQL)
    stream.refresh(expect="full")
    env.apply([S.Insert("t", [S.row(None, k=3, g=None, v=None), S.row(None, k=1, g="c", v=7)]), S.DeleteRows("t", [2])])
    assert stream.refresh(expect="differential").rows_changed > 0
    stream.check()
