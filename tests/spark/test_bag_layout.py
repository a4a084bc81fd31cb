"""A bag met by its columns is stored as its rows come (bag_result.py): a tuple the source holds
several times is several stored rows after a full build; a refresh adds a row for a tuple the
change adds to ('I': a change of only added rows is an append), and a tuple it takes from that
is stored as several rows becomes one ('D' beside 'I').

Real refreshes on real Delta tables, through the dbt process's rewrite of the touched files with
Arrow (bag_rewrite.py), delta-rs' MERGE in the dbt process (past bag_rewrite.MAX_CANDIDATES) and
the executors' rewrite (the three ways the embedded engine applies a bag's change), each compared
with the recompute, and a stream table reading the bag (its counts as weights) compared with its
own.
"""

from __future__ import annotations

import os

import pytest

from python_helpers.runtime.delta.embedded import bag_rewrite, executor_merge, tables
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


PATHS = ["arrow", "delta_rs", "executors"]


def _take_path(monkeypatch, path: str) -> None:
    if path == "delta_rs":
        monkeypatch.setattr(bag_rewrite, "MAX_CANDIDATES", -1)  # any candidate is too many
    if path == "executors":
        monkeypatch.setattr(executor_merge, "FROM_STORED_ROWS", 0)


@pytest.mark.parametrize("path", PATHS)
def test_a_tuple_stored_as_several_rows_is_rewritten_as_one(env, monkeypatch, path):
    _take_path(monkeypatch, path)
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
            S.Insert("t", [S.row(None, k=None, v=40)]),  # (NULL, 40): one more, inserted as a row
        ]
    )
    _refresh(bag, down, (4, 0, 6))  # 3 + 2 + 1 stored rows deleted; 2 rewritten tuples, 2 added
    assert _last_operation(env, bag) == {"arrow": "WRITE", "delta_rs": "MERGE", "executors": "WRITE"}[path]
    assert _stored(env, bag) == {(1, 10): [2], (2, 20): [1], (2, 21): [1], (None, 40): [1, 1, 1]}

    # One of (1, 10)'s two, now one stored row: updated in place; (2, 21) gains a row.
    env.apply([S.DeleteWhere("t", "id", 2), S.Insert("t", [S.row(None, k=2, v=21)])])
    _refresh(bag, down, (1, 1, 0))
    assert _stored(env, bag) == {(1, 10): [1], (2, 20): [1], (2, 21): [1, 1], (None, 40): [1, 1, 1]}

    # (1, 10)'s last row goes; (NULL, 40)'s three rows become one of 2.
    env.apply([S.DeleteWhere("t", "id", 3), S.DeleteWhere("t", "id", 7)])
    _refresh(bag, down, (1, 0, 4))
    assert _stored(env, bag) == {(2, 20): [1], (2, 21): [1, 1], (None, 40): [2]}

    # Only added rows: an append, no stored file read or rewritten.
    env.apply([S.Insert("t", [S.row(None, k=2, v=20), S.row(None, k=5, v=50)])])
    counters = _refresh(bag, down, (2, 0, 0))
    assert _stored(env, bag) == {(2, 20): [1, 1], (2, 21): [1, 1], (None, 40): [2], (5, 50): [1]}
    assert counters.get("files_rewritten", 0) == 0, counters
    assert bool(counters.get("merged_by_executors")) == (path == "executors")
    if path == "delta_rs":
        assert _last_operation(env, bag) == "WRITE"


def _refresh(bag, down, counts: tuple) -> dict:
    """Refresh the bag and the stream table over it, each checked against its recompute; the
    bag's stored rows (inserted, updated, deleted) as `counts`."""
    counters = bag.refresh(expect="differential").counters
    bag.check()
    assert (counters["rows_inserted"], counters["rows_updated"], counters["rows_deleted"]) == counts, counters
    down.refresh(expect="differential")
    down.check()
    return counters


def _last_operation(env, stream) -> str:
    table = tables.table_at(storage_path(env.spark, env.target, stream.identifier))
    return table.history(1)[0]["operation"]


def test_a_distinct_result_stays_one_row_per_tuple(env):
    env.source("t", ROWS)
    distinct = env.stream("dist", "SELECT DISTINCT k, v FROM {src}.t")
    distinct.refresh(expect="full")
    assert _stored(env, distinct) == {(1, 10): [3], (2, 20): [2], (3, 30): [1], (None, 40): [2]}
    env.apply([S.DeleteWhere("t", "id", 1), S.Insert("t", [S.row(None, k=3, v=30)])])
    distinct.refresh(expect="differential")
    distinct.check()
    assert _stored(env, distinct) == {(1, 10): [2], (2, 20): [2], (3, 30): [2], (None, 40): [2]}


@pytest.mark.parametrize("path", PATHS)
def test_a_change_of_only_added_rows_does_not_read_the_stored_rows(env, monkeypatch, path):
    """Each stored file is swapped for one that is not parquet while the refresh runs: a change
    that only adds rows is appended without anyone reading them; one that takes a row away reads
    them (and fails here, nothing written): Spark where the executors apply the change, the dbt
    process's scan elsewhere (bag_rewrite.py reads the files' footers before its candidate bound
    could send the change to bag_lookup.py, so the `delta_rs` case fails there too)."""
    from python_helpers.runtime.refresh import differential

    monkeypatch.setattr(differential, "RESTRICT_STORAGE_BYTES", 0)  # as for a large stored result
    _take_path(monkeypatch, path)
    env.source("t", ROWS)
    bag = env.stream("bag", "SELECT k, v FROM {src}.t")
    bag.refresh(expect="full")
    root = storage_path(env.spark, env.target, bag.identifier).removeprefix("file:")
    stored = tables.table_at(root)
    files = [os.path.join(root, p) for p in tables.add_actions(stored).column("path").to_pylist()]

    def refresh_without_stored_rows(expect):
        for f in files:
            os.rename(f, f + ".kept")
            with open(f, "wb") as out:
                out.write(b"not parquet" * 100)
        try:
            return bag.refresh(expect=expect)
        finally:
            for f in files:
                os.replace(f + ".kept", f)

    env.apply([S.Insert("t", [S.row(None, k=1, v=10), S.row(None, k=9, v=90)])])
    result = refresh_without_stored_rows("differential")
    assert result.counters["rows_inserted"] == 2
    assert bool(result.counters.get("merged_by_executors")) == (path == "executors")
    env.apply([S.DeleteWhere("t", "id", 1)])
    with pytest.raises(Exception) as failed:  # noqa: B017 - Spark's or Arrow's own, for a file that is not parquet
        refresh_without_stored_rows("differential")
    message = str(failed.value)
    reader = "FAILED_READ_FILE" if path == "executors" else "Parquet magic bytes not found"
    assert reader in message and any(os.path.basename(f) in message for f in files), message[:500]
    # The swapped refresh published links to the swapped files too; this refresh rewrites the
    # one stored file (its row with id 1) and publishes again, so the check reads good files.
    bag.refresh(expect="differential")
    bag.check()
