"""A bag met by its columns is stored as its rows come (bag_result.py): a tuple the source holds
several times is several stored rows after a full build, and a refresh that changes such a
tuple deletes its rows and inserts one with their counts added up ('D' beside 'I').

Real refreshes on real Delta tables, through delta-rs' MERGE in the dbt process and through the
executors' rewrite (the two ways the embedded engine applies a change), each compared with the
recompute, and a stream table reading the bag (its counts as weights) compared with its own.
"""

from __future__ import annotations

import pytest

from python_helpers.runtime.delta.embedded import executor_merge, tables
from python_helpers.runtime.delta.locations import storage_path
from tests.support import sources as S

pytestmark = pytest.mark.spark

# (k, v) = (1, 10) three times, (2, 20) twice, (NULL, 40) twice (NULL meets NULL).
ROWS = [
    S.row(1, k=1, v=10),
    S.row(2, k=1, v=10),
    S.row(3, k=1, v=10),
    S.row(4, k=2, v=20),
    S.row(5, k=2, v=20),
    S.row(6, k=3, v=30),
    S.row(7, k=None, v=40),
    S.row(8, k=None, v=40),
]


def _stored(env, stream) -> dict:
    """The stored (k, v) tuples: each one's stored rows' counts, sorted."""
    table = tables.table_at(storage_path(env.spark, env.target, stream.identifier))
    out: dict = {}
    for r in table.to_pyarrow_table().to_pylist():
        out.setdefault((r["k"], r["v"]), []).append(r["__dvm_count"])
    return {t: sorted(c) for t, c in out.items()}


@pytest.mark.parametrize("path", ["delta_rs", "executors"])
def test_a_tuple_stored_as_several_rows_is_rewritten_as_one(env, monkeypatch, path):
    if path == "executors":
        monkeypatch.setattr(executor_merge, "FROM_STORED_ROWS", 0)
    env.source("t", ROWS)
    bag = env.stream("bag", "SELECT k, v FROM {src}.t")
    down = env.stream(
        "down",
        f"SELECT v, COUNT(*) AS n FROM {env.target}.bag GROUP BY v",
        oracle_sql="SELECT v, COUNT(*) AS n FROM {src}.t GROUP BY v",
    )
    bag.refresh(expect="full")
    down.refresh(expect="full")
    # Built as the rows come: no GROUP BY, a count of 1 per row.
    assert _stored(env, bag) == {(1, 10): [1, 1, 1], (2, 20): [1, 1], (3, 30): [1], (None, 40): [1, 1]}

    env.apply(
        [
            S.DeleteWhere("t", "id", 1),  # (1, 10): three rows, two left
            S.UpdateWhere("t", "id", 4, {"v": 21}),  # (2, 20): two rows, one left; (2, 21) is new
            S.DeleteWhere("t", "id", 6),  # (3, 30): its one row goes
            S.Insert("t", [S.row(None, k=None, v=40)]),  # (NULL, 40): two rows, three now
        ]
    )
    result = bag.refresh(expect="differential")
    bag.check()
    assert _stored(env, bag) == {(1, 10): [2], (2, 20): [1], (2, 21): [1], (None, 40): [3]}
    counters = result.counters
    # Stored rows: 3 + 2 + 2 deleted and (3, 30); 3 rewritten tuples and (2, 21) inserted.
    assert (counters["rows_inserted"], counters["rows_updated"], counters["rows_deleted"]) == (4, 0, 8), counters
    down.refresh(expect="differential")
    down.check()

    # Now one row each: a tuple's last copies go, another one gains one (updated in place).
    env.apply([S.DeleteWhere("t", "k", 1), S.Insert("t", [S.row(None, k=2, v=21)])])
    result = bag.refresh(expect="differential")
    bag.check()
    assert _stored(env, bag) == {(2, 20): [1], (2, 21): [2], (None, 40): [3]}
    counters = result.counters
    assert (counters["rows_inserted"], counters["rows_updated"], counters["rows_deleted"]) == (0, 1, 1), counters
    down.refresh(expect="differential")
    down.check()
    assert bool(counters.get("merged_by_executors")) == (path == "executors")


def test_a_distinct_result_stays_one_row_per_tuple(env):
    env.source("t", ROWS)
    distinct = env.stream("dist", "SELECT DISTINCT k, v FROM {src}.t")
    distinct.refresh(expect="full")
    assert _stored(env, distinct) == {(1, 10): [3], (2, 20): [2], (3, 30): [1], (None, 40): [2]}
    env.apply([S.DeleteWhere("t", "id", 1), S.Insert("t", [S.row(None, k=3, v=30)])])
    distinct.refresh(expect="differential")
    distinct.check()
    assert _stored(env, distinct) == {(1, 10): [2], (2, 20): [2], (3, 30): [2], (None, 40): [2]}
