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
from python_helpers.runtime.delta.embedded import bag_lookup, bag_rewrite, storage, tables
from tests.support.bag_tuples import COLUMNS, TUPLES, change_table, stored_table, totals


def _stored(path: str) -> list:
    table = tables.table_at(path).to_pyarrow_table()
    return [((r["k"], r["v"]), r[COUNT]) for r in table.to_pylist()]


def _build(path: str, files: list) -> int:
    """The stored result as one Delta table, each list of `files` a data file of its own (the
    stored rows of several refreshes); returns the version."""
    write_deltalake(path, stored_table([]))
    for stored in files:
        if stored:
            write_deltalake(path, stored_table(stored), mode="append")
    return tables.table_at(path).version()


def _rewrite(path: str, weights: dict, version: int, offset: int = 2):
    return bag_rewrite.rewrite(
        tables.table_at(path, version),
        path,
        change_table(weights),
        COLUMNS,
        {"model": "m", "offsets": {"s.t": {"version": offset}}},
        version,
    )


@st.composite
def files_and_change(draw):
    files = draw(
        st.lists(st.lists(st.tuples(st.sampled_from(TUPLES), st.integers(1, 3)), max_size=6), min_size=1, max_size=3)
    )
    counts = totals([r for f in files for r in f])
    weights = {}
    for t in draw(st.lists(st.sampled_from(TUPLES), unique=True, max_size=len(TUPLES))):
        weights[t] = (
            draw(st.integers(-counts.get(t, 0), 3).filter(lambda x: x != 0))
            if counts.get(t)
            else draw(st.integers(1, 3))
        )
    # The rewrite is for a change that takes rows (bag_rewrite.takes_rows).
    if not any(w < 0 for w in weights.values()):
        losing = sorted(counts, key=repr)
        if not losing:
            return files, {}
        weights[losing[0]] = -1
    return files, weights


@settings(max_examples=40, deadline=None)
@given(files_and_change())
def test_each_tuple_ends_with_its_count_plus_the_weight(case):
    files, weights = case
    if not weights:
        return  # nothing stored, nothing to take: not a rewrite's case
    path = tempfile.mkdtemp(prefix="bag_rewrite_")
    try:
        version = _build(path, files)
        shutil.copytree(path, path + "_merge")
        before = set(tables.table_at(path).file_uris())
        merged = _rewrite(path, weights, version)
        # The same change through the lookup and delta-rs' MERGE (the path it replaces): the
        # same tuples and the same counts.
        by_merge = _lookup_and_merge(path + "_merge", weights, version)
        assert (merged.rows, merged.inserted, merged.updated, merged.deleted) == by_merge
        assert totals(_stored(path + "_merge")) == totals(_stored(path))
        after = _stored(path)
        expected = totals([r for f in files for r in f])
        for t, w in weights.items():
            expected[t] = expected.get(t, 0) + w
        assert totals(after) == {t: c for t, c in expected.items() if c}
        for t, w in weights.items():
            if w < 0:
                assert sum(1 for s, _ in after if s == t) <= 1, (t, after)
        # Exactly the files that hold a losing tuple are replaced.
        losing = {t for t, w in weights.items() if w < 0}
        now = set(tables.table_at(path).file_uris())
        assert before - now == {f for f in before if _tuples_of(f) & losing}
        assert merged.files_rewritten == len(before - now)
        assert storage.read_metadata(path)["offsets"]["s.t"]["version"] == 2
    finally:
        shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(path + "_merge", ignore_errors=True)


def _lookup_and_merge(path: str, weights: dict, version: int) -> tuple:
    """The change applied by bag_lookup's actions and delta-rs' MERGE: (MERGE rows, stored rows
    inserted, updated, deleted)."""
    table = tables.table_at(path, version)
    types = {f.name: f.type for f in tables.arrow_schema(table)}
    rows = bag_lookup.merge_rows(lambda: tables.parquet_datasets(table, path), types, change_table(weights), COLUMNS)
    done = storage.merge_rows(path, rows, [*COLUMNS, COUNT], COLUMNS, {"offsets": {}}, version)
    counts = [int(done.get(f"num_target_rows_{k}", 0)) for k in ("inserted", "updated", "deleted")]
    return (rows.num_rows, *counts)


@pytest.mark.parametrize("held", [bag_rewrite.HELD_BYTES, 0])
def test_counts_are_those_the_merge_reports(tmp_path, monkeypatch, held):
    """(1, a) stored as two rows loses one: both go, one row of 1 is added (2 deleted, 1 inserted);
    (2, b), one row, loses one of its 2: updated; (None, None) gains a row: inserted. With no
    bytes held, each touched file is read again for its rewrite."""
    monkeypatch.setattr(bag_rewrite, "HELD_BYTES", held)
    path = str(tmp_path / "stored")
    version = _build(path, [[((1, "a"), 1), ((2, "b"), 2)], [((1, "a"), 1), ((2, "a"), 5)]])
    merged = _rewrite(path, {(1, "a"): -1, (2, "b"): -1, (None, None): 1}, version)
    assert (merged.rows, merged.inserted, merged.updated, merged.deleted, merged.files_rewritten) == (4, 2, 1, 2, 2)
    assert totals(_stored(path)) == {(1, "a"): 1, (2, "b"): 1, (2, "a"): 5, (None, None): 1}
    assert tables.table_at(path).history(1)[0]["operation"] == "WRITE"


def test_a_file_without_a_losing_tuple_is_not_rewritten(tmp_path):
    path = str(tmp_path / "stored")
    version = _build(path, [[((1, "a"), 1)], [((2, "b"), 1)]])
    kept = [f for f in tables.table_at(path).file_uris() if ((2, "b") in _tuples_of(f))]
    _rewrite(path, {(1, "a"): -1}, version)
    assert set(kept) <= set(tables.table_at(path).file_uris())
    assert totals(_stored(path)) == {(2, "b"): 1}


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
    assert totals(_stored(path)) == {(1, "a"): 2}
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
    assert bag_rewrite.takes_rows(change_table({(1, "a"): -1, (2, "b"): 1}))
    assert not bag_rewrite.takes_rows(change_table({(1, "a"): 2}))
    assert not bag_rewrite.takes_rows(change_table({}))


def test_a_file_whose_rows_all_go_is_removed_without_a_new_one(tmp_path):
    path = str(tmp_path / "stored")
    version = _build(path, [[((1, "a"), 1), ((1, "a"), 2)], [((2, "b"), 1)]])
    merged = _rewrite(path, {(1, "a"): -3}, version)
    assert (merged.rows, merged.deleted, merged.files_rewritten) == (1, 2, 1)
    assert totals(_stored(path)) == {(2, "b"): 1}
    assert len(tables.table_at(path).file_uris()) == 1
    assert not [d for d in os.listdir(path) if d.startswith("merge-")]  # no directory for nothing


def test_every_matchable_type_and_strings_of_either_writer(tmp_path):
    """Booleans, decimals, dates, timestamps with and without a time zone, small integers and
    strings, NULLs among them, in a file of delta-rs' write (strings as string) and one of its
    MERGE (string_view): the losing tuples' rows go, the rest stay."""
    import datetime as dt
    from decimal import Decimal

    types = {
        "b": pa.bool_(),
        "d": pa.decimal128(10, 2),
        "day": pa.date32(),
        "ts": pa.timestamp("us", tz="UTC"),
        "ntz": pa.timestamp("us"),
        "small": pa.int8(),
        "s": pa.string(),
    }
    columns = list(types)
    when = dt.datetime(2024, 1, 2, 3, 4, 5, 6)
    rows = [
        (True, Decimal("1.50"), dt.date(2024, 1, 1), when.replace(tzinfo=dt.timezone.utc), when, 1, "x"),
        (False, Decimal("1.50"), dt.date(2024, 1, 1), when.replace(tzinfo=dt.timezone.utc), when, 1, "x"),
        (None, None, None, None, None, None, None),
        (True, Decimal("-2.00"), dt.date(1969, 12, 31), None, when, -3, ""),
    ]

    def table_of(tuples: list, counts: list) -> pa.Table:
        data = {c: pa.array([t[i] for t in tuples], types[c]) for i, c in enumerate(columns)}
        return pa.table({**data, COUNT: pa.array(counts, pa.int64())})

    path = str(tmp_path / "stored")
    write_deltalake(path, table_of(rows[:2], [1, 2]))
    table = tables.table_at(path)
    table.merge(
        table_of(rows[2:], [3, 1]), "false", source_alias="s", target_alias="t"
    ).when_not_matched_insert_all().execute()
    table = tables.table_at(path)
    kinds = {str(d.schema.field("s").type) for d in tables.parquet_datasets(table, path)}
    assert kinds == {"string", "string_view"}, kinds
    change = table_of([rows[1], rows[2], rows[3]], [0, 0, 0]).drop_columns([COUNT])
    change = change.append_column(WEIGHT, pa.array([-2, -1, -1], pa.int64()))
    merged = bag_rewrite.rewrite(table, path, change, columns, {"model": "m"}, table.version())
    assert (merged.deleted, merged.updated, merged.files_rewritten) == (2, 1, 2)
    stored = tables.table_at(path).to_pyarrow_table()
    left = sorted(((tuple(r[c] for c in columns), r[COUNT]) for r in stored.to_pylist()), key=repr)
    assert left == sorted([(rows[0], 1), (rows[2], 2)], key=repr)
