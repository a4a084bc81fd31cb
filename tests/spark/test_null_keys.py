"""A change whose rows have a NULL join key, on a source where many rows have one.

A left, semi or anti join by `=` matches no row with a NULL key: such a row's output is its
own. Its change is therefore recomputed alone, and the other input's rows with a NULL key (and
the changed input's other ones) are not read to recompute the changed keys. Checked against the
oracle, and by the size of every intermediate the refresh computes (a read of every NULL-key
row would hold more than the keyed rows the change touches)."""

from __future__ import annotations

import pytest

from python_helpers.dvm.sqlgen import render
from python_helpers.runtime.delta import bound_views
from tests.support import sources as S

pytestmark = pytest.mark.spark

NULL_ROWS = 120  # rows of each source with a NULL key; every intermediate must stay well below

QUERIES = {
    "anti": "SELECT a.id, a.k, a.v FROM {src}.t1 a WHERE NOT EXISTS (SELECT 1 FROM {src}.t2 b WHERE b.k = a.k)",
    "left": "SELECT a.id, a.k, b.id AS bid, b.v AS bv FROM {src}.t1 a LEFT JOIN {src}.t2 b ON a.k = b.k",
    "or_not_exists": (
        "SELECT a.id, a.g FROM {src}.t1 a WHERE a.g = 'a' OR NOT EXISTS (SELECT 1 FROM {src}.t2 b WHERE b.k = a.k)"
    ),
    "semi": "SELECT a.id, a.v FROM {src}.t1 a WHERE a.k IN (SELECT b.k FROM {src}.t2 b WHERE b.v > 0)",
}


def _rows(start, keys: list) -> list:
    """Rows with ids from `start` (None: the source assigns fresh ids) and the given keys."""
    return [
        S.row(None if start is None else start + i, k, "abc"[i % 3], i % 7 - 3, i / 4, f"{i}.50", "2024-02-01")
        for i, k in enumerate(keys)
    ]


def _sizes(monkeypatch) -> list:
    """The row count of every intermediate a refresh computes (BoundViews.materialize)."""
    sizes: list = []
    original = bound_views.BoundViews.materialize

    def counted(self, query):
        served = original(self, query)
        sizes.append(int(self.conn.rows(f"SELECT COUNT(*) FROM ({render(served)}) AS _n")[0][0]))
        return served

    monkeypatch.setattr(bound_views.BoundViews, "materialize", counted)
    return sizes


@pytest.mark.parametrize("shape", sorted(QUERIES))
def test_a_change_with_null_keys_reads_no_other_null_key_rows(env, monkeypatch, shape):
    env.source("t1", _rows(1, [None] * NULL_ROWS + [1, 1, 2, 3]))
    env.source("t2", _rows(1, [None] * NULL_ROWS + [1, 2, 2]))
    stream = env.stream(f"nullkeys_{shape}", QUERIES[shape], refresh_mode="differential")
    stream.refresh(expect="full")
    sizes = _sizes(monkeypatch)
    batches = [
        # both inputs change, and the left change holds NULL keys: inserted, updated, deleted
        [
            S.Insert("t1", _rows(None, [None, 3, None])),
            S.UpdateWhere("t1", "id", 2, {"v": 5}),
            S.DeleteWhere("t1", "id", 3),
            S.UpdateWhere("t2", "k", 2, {"v": -4}),
            S.Insert("t2", _rows(None, [3, None])),
            # a right change that passes `semi`'s filter (v > 0), NULL key included: one it all
            # filtered out would leave that side unchanged and compute no intermediate
            S.Insert("t2", [S.row(None, k, "a", 4, 0.5, "1.50", "2024-02-01") for k in (3, None)]),
        ],
        # a key's last match goes, a NULL-key row gets a key, a keyed one loses it
        [
            S.DeleteWhere("t2", "k", 1),
            S.UpdateWhere("t1", "id", 4, {"k": 9}),
            S.UpdateWhere("t1", "id", NULL_ROWS + 1, {"k": None}),
            S.UpdateWhere("t1", "id", 5, {"k": 2}),
        ],
    ]
    for batch in batches:
        env.apply(batch)
        stream.refresh(expect="differential")
        stream.check()
    assert sizes, "the refresh computed no intermediate: the test would check nothing"
    assert max(sizes) < NULL_ROWS // 2, sizes
