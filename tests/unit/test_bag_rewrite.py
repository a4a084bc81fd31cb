"""A bag's change that takes rows, applied by rewriting the touched files with Arrow
(bag_rewrite.py), on real Delta tables (delta-rs, no Spark): every tuple ends with its old count
plus the change's weight, a tuple the change took from is one stored row (or none), files
without a losing tuple stay, and a refresh that cannot apply its change writes nothing."""

from __future__ import annotations

import os
import shutil
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from python_helpers.dvm.stored_reads import COUNT
from python_helpers.dvm.tree import WEIGHT
from python_helpers.runtime.delta.base import ConcurrentCommit, StoredRowsMissing
from python_helpers.runtime.delta.embedded import bag_rewrite, storage, tables

COLUMNS = ["k", "v"]
TUPLES = [(k, v) for k in (None, 1, 2) for v in (None, "a", "b")]


def _rows(stored: list) -> pa.Table:
    """Stored rows [((k, v), count)] as the stored result holds them."""
    return pa.table(
        {
            "k": pa.array([t[0] for t, _ in stored], pa.int64()),
            "v": pa.array([t[1] for t, _ in stored], pa.string()),
            COUNT: pa.array([c for _, c in stored], pa.int64()),
        }
    )


def _change(weights: dict) -> pa.Table:
    items = sorted(weights.items(), key=repr)
    return pa.table(
        {
            "k": pa.array([t[0] for t, _ in items], pa.int64()),
            "v": pa.array([t[1] for t, _ in items], pa.string()),
            WEIGHT: pa.array([w for _, w in items], pa.int64()),
        }
    )


def _totals(stored: list) -> dict:
    totals: dict = {}
    for t, c in stored:
        totals[t] = totals.get(t, 0) + c
    return {t: c for t, c in totals.items() if c}


def _stored(path: str) -> list:
    table = tables.table_at(path).to_pyarrow_table()
    return [((r["k"], r["v"]), r[COUNT]) for r in table.to_pylist()]


def _build(path: str, files: list) -> int:
    """The stored result as one Delta table, each list of `files` a data file of its own (the
    stored rows of several refreshes); returns the version."""
    write_deltalake(path, _rows([]))
    for stored in files:
        if stored:
            write_deltalake(path, _rows(stored), mode="append")
    return tables.table_at(path).version()


def _rewrite(path: str, weights: dict, version: int, offset: int = 2):
    return bag_rewrite.rewrite(
        tables.table_at(path, version),
        path,
        _change(weights),
        COLUMNS,
        {"model": "m", "offsets": {"s.t": {"version": offset}}},
        version,
    )


@st.composite
def files_and_change(draw):
    files = draw(
        st.lists(st.lists(st.tuples(st.sampled_from(TUPLES), st.integers(1, 3)), max_size=6), min_size=1, max_size=3)
    )
    totals = _totals([r for f in files for r in f])
    weights = {}
    for t in draw(st.lists(st.sampled_from(TUPLES), unique=True, max_size=len(TUPLES))):
        weights[t] = (
            draw(st.integers(-totals.get(t, 0), 3).filter(lambda x: x != 0))
            if totals.get(t)
            else draw(st.integers(1, 3))
        )
    # The rewrite is for a change that takes rows (bag_rewrite.takes_rows).
    if not any(w < 0 for w in weights.values()):
        losing = sorted(totals, key=repr)
        if not losing:
            return files, {}
        weights[losing[0]] = -1
    return files, weights


@settings(max_examples=60, deadline=None)
@given(files_and_change())
def test_each_tuple_ends_with_its_count_plus_the_weight(case):
    files, weights = case
    if not weights:
        return  # nothing stored, nothing to take: not a rewrite's case
    path = tempfile.mkdtemp(prefix="bag_rewrite_")
    try:
        version = _build(path, files)
        before = set(tables.table_at(path).file_uris())
        merged = _rewrite(path, weights, version)
        after = _stored(path)
        expected = _totals([r for f in files for r in f])
        for t, w in weights.items():
            expected[t] = expected.get(t, 0) + w
        assert _totals(after) == {t: c for t, c in expected.items() if c}
        for t, w in weights.items():
            if w < 0:
                assert sum(1 for s, _ in after if s == t) <= 1, (t, after)
        # Exactly the files that hold a losing tuple are replaced.
        losing = {t for t, w in weights.items() if w < 0}
        now = set(tables.table_at(path).file_uris())
        assert before - now == {f for f in before if _tuples_of(f) & losing}
        assert merged.files_rewritten == len(before - now)
        assert merged.rows == len(weights)
        assert storage.read_metadata(path)["offsets"]["s.t"]["version"] == 2
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("held", [bag_rewrite.HELD_BYTES, 0])
def test_counts_are_those_the_merge_reports(tmp_path, monkeypatch, held):
    """(1, a) stored as two rows loses one: both go, one row of 1 is added (2 deleted, 1 inserted);
    (2, b), one row, loses one of its 2: updated; (None, None) gains a row: inserted. With no
    bytes held, each touched file is read again for its rewrite."""
    monkeypatch.setattr(bag_rewrite, "HELD_BYTES", held)
    path = str(tmp_path / "stored")
    version = _build(path, [[((1, "a"), 1), ((2, "b"), 2)], [((1, "a"), 1), ((2, "a"), 5)]])
    merged = _rewrite(path, {(1, "a"): -1, (2, "b"): -1, (None, None): 1}, version)
    assert (merged.inserted, merged.updated, merged.deleted, merged.files_rewritten) == (2, 1, 2, 2)
    assert _totals(_stored(path)) == {(1, "a"): 1, (2, "b"): 1, (2, "a"): 5, (None, None): 1}
    assert tables.table_at(path).history(1)[0]["operation"] == "WRITE"


def test_a_file_without_a_losing_tuple_is_not_rewritten(tmp_path):
    path = str(tmp_path / "stored")
    version = _build(path, [[((1, "a"), 1)], [((2, "b"), 1)]])
    kept = [f for f in tables.table_at(path).file_uris() if ((2, "b") in _tuples_of(f))]
    _rewrite(path, {(1, "a"): -1}, version)
    assert set(kept) <= set(tables.table_at(path).file_uris())
    assert _totals(_stored(path)) == {(2, "b"): 1}


def _tuples_of(file: str) -> set:
    data = pq.read_table(file)
    return set(zip(data.column("k").to_pylist(), data.column("v").to_pylist()))


def test_taking_more_than_is_stored_writes_nothing(tmp_path):
    path = str(tmp_path / "stored")
    version = _build(path, [[((1, "a"), 1)]])
    with pytest.raises(StoredRowsMissing):
        _rewrite(path, {(1, "a"): -2}, version)
    assert tables.table_at(path).version() == version
    assert not [d for d in os.listdir(path) if d.startswith("merge-")]


def test_a_rival_commit_since_the_read_fails_it_and_leaves_no_files(tmp_path):
    path = str(tmp_path / "stored")
    version = _build(path, [[((1, "a"), 2)]])
    storage.commit_offsets_only(path, {"offsets": {"s.t": {"version": 5}}}, version)  # a rival refresh
    with pytest.raises(ConcurrentCommit):
        _rewrite(path, {(1, "a"): -1}, version, offset=6)
    assert storage.read_metadata(path)["offsets"]["s.t"]["version"] == 5
    assert _totals(_stored(path)) == {(1, "a"): 2}
    assert not [d for d in os.listdir(path) if d.startswith("merge-")]


def test_too_many_candidates_stop_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(bag_rewrite, "MAX_CANDIDATES", 1)  # (1, a) is stored as two rows
    path = str(tmp_path / "stored")
    version = _build(path, [[((1, "a"), 1), ((1, "b"), 1)], [((1, "a"), 1)]])
    with pytest.raises(bag_rewrite.TooMany):
        _rewrite(path, {(1, "a"): -1}, version)
    assert tables.table_at(path).version() == version
    assert not [d for d in os.listdir(path) if d.startswith("merge-")]


def test_takes_rows():
    assert bag_rewrite.takes_rows(_change({(1, "a"): -1, (2, "b"): 1}))
    assert not bag_rewrite.takes_rows(_change({(1, "a"): 2}))
    assert not bag_rewrite.takes_rows(_change({}))
