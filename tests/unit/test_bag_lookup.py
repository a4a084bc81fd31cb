"""The MERGE rows of a bag stored as its rows come, resolved in the dbt process (bag_lookup.py):
applied the way storage.merge_rows has delta-rs apply them, they must leave every tuple stored
with its old count plus the change's weight, whatever rows the tuple was stored as. A change
that takes more than is stored must stop before anything is written."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from python_helpers.dvm.merge_actions import ACTION, DELETE, INSERT, UPSERT
from python_helpers.dvm.stored_reads import COUNT
from python_helpers.dvm.tree import WEIGHT
from python_helpers.runtime.connections.files import WrittenFile
from python_helpers.runtime.delta.base import StoredRowsMissing
from python_helpers.runtime.delta.embedded import bag_lookup, executor_writes, storage, tables
from tests.support.bag_tuples import COLUMNS, TUPLES, change_table, stored_table, totals


def _apply(stored: list, merge_rows: pa.Table) -> list:
    """The MERGE of storage.merge_rows: a non-INSERT row meets the stored rows of its tuple (NULL
    meets NULL); DELETE deletes them, UPSERT updates them; a row meeting none is inserted unless
    it is a DELETE."""
    out = list(stored)
    for row in merge_rows.to_pylist():
        key = (row["k"], row["v"])
        met = row[ACTION] != INSERT and any(t == key for t, _ in out)
        if met and row[ACTION] == DELETE:
            out = [(t, c) for t, c in out if t != key]
        elif met and row[ACTION] == UPSERT:
            out = [(t, row[COUNT] if t == key else c) for t, c in out]
        elif not met and row[ACTION] != DELETE:
            out.append((key, row[COUNT]))
    return out


@st.composite
def stored_and_change(draw):
    stored = draw(st.lists(st.tuples(st.sampled_from(TUPLES), st.integers(1, 3)), max_size=12))
    counts = totals(stored)
    weights = {}
    for t in draw(st.lists(st.sampled_from(TUPLES), unique=True, max_size=len(TUPLES))):
        w = (
            draw(st.integers(-counts.get(t, 0), 3).filter(lambda x: x != 0))
            if counts.get(t)
            else draw(st.integers(1, 3))
        )
        weights[t] = w
    return stored, weights


@settings(max_examples=200, deadline=None)
@given(stored_and_change())
def test_the_merge_rows_leave_each_tuple_with_its_count_plus_the_weight(case):
    stored, weights = case
    table = stored_table(stored)
    change = change_table(weights)
    # The lookup reads only the rows its filter keeps: every row of a losing tuple must pass.
    condition = bag_lookup.losing_filter(change, COLUMNS)
    kept = ds.dataset(table).to_table(filter=condition) if condition is not None else table.slice(0, 0)
    rows = bag_lookup.actions(change, COLUMNS, bag_lookup.stored_counts(kept, COLUMNS))
    after = _apply(stored, rows)
    expected = totals(stored)
    for t, w in weights.items():
        expected[t] = expected.get(t, 0) + w
    assert totals(after) == {t: c for t, c in expected.items() if c}
    # A tuple the change took from is one stored row after the MERGE (or none).
    for t, w in weights.items():
        if w < 0:
            assert sum(1 for s, _ in after if s == t) <= 1


def test_a_change_of_only_added_rows_looks_nothing_up():
    change = change_table({(1, "a"): 2, (None, None): 1})
    assert bag_lookup.losing_filter(change, COLUMNS) is None
    rows = bag_lookup.actions(change, COLUMNS, {})
    assert sorted(rows.column(ACTION).to_pylist()) == [INSERT, INSERT]


@pytest.mark.parametrize("stored", [[], [((1, "a"), 1)]])
def test_taking_more_than_is_stored_raises_before_anything_is_written(stored):
    change = change_table({(1, "a"): -2})
    with pytest.raises(StoredRowsMissing, match="1 tuples"):
        bag_lookup.actions(change, COLUMNS, bag_lookup.stored_counts(stored_table(stored), COLUMNS))


def test_the_lookup_reads_files_whose_log_has_no_bounds_for_a_column(tmp_path):
    """The executors' adds keep no min/max for a boolean (executor_writes.stats_of); for such a
    column without NULLs delta-rs' own dataset guarantees `>= null`, which no filter passes, and
    the lookup would miss the stored rows. The lookup reads the files by their footers instead."""
    target = str(tmp_path / "stored")
    data = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "flag": pa.array([True, False, True]),
            COUNT: pa.array([1, 1, 1], pa.int64()),
        }
    )
    write_deltalake(target, data.slice(0, 0))  # the table, then the executors' kind of commit
    (tmp_path / "stored" / "full-1").mkdir()
    path = tmp_path / "stored" / "full-1" / "part-0.parquet"
    pq.write_table(data, path)
    meta = pq.read_metadata(path)
    adds = executor_writes.add_actions("full-1", [WrittenFile(str(path), path.stat().st_size, 0)], [meta], data.schema)
    storage.commit_files(target, data.schema, adds, {"model": "m"}, 0)
    table = tables.table_at(target)
    change = pa.table({"id": pa.array([2], pa.int64()), "flag": pa.array([False]), WEIGHT: pa.array([-1], pa.int64())})
    types = {f.name: f.type for f in tables.arrow_schema(table)}
    rows = bag_lookup.merge_rows(lambda: tables.parquet_datasets(table, target), types, change, ["id", "flag"])
    assert rows.to_pylist() == [{ACTION: DELETE, "id": 2, "flag": False, COUNT: 0}]


def test_the_lookup_meets_strings_in_files_of_either_writer(tmp_path):
    """delta-rs' MERGE writes strings as string_view, Spark and delta-rs' writes as string: a
    filter's values are checked against each file's statistics in that file's own type."""
    target = str(tmp_path / "stored")
    write_deltalake(
        target, pa.table({"g": pa.array(["a", None]), COUNT: pa.array([1, 1], pa.int64())})
    )  # written as string
    table = tables.table_at(target)
    table.merge(
        pa.table({"g": pa.array(["b"]), COUNT: pa.array([2], pa.int64())}),
        "t.g = s.g",
        source_alias="s",
        target_alias="t",
    ).when_not_matched_insert_all().execute()  # a file of its own, as string_view
    table = tables.table_at(target)
    kinds = {str(d.schema.field("g").type) for d in tables.parquet_datasets(table, target)}
    assert kinds == {"string", "string_view"}, kinds
    change = pa.table({"g": pa.array(["a", "b", None], pa.string_view()), WEIGHT: pa.array([-1, -1, -1], pa.int64())})
    types = {f.name: f.type for f in tables.arrow_schema(table)}
    rows = bag_lookup.merge_rows(lambda: tables.parquet_datasets(table, target), types, change, ["g"])
    assert sorted(rows.to_pylist(), key=repr) == sorted(
        [
            {ACTION: DELETE, "g": "a", COUNT: 0},
            {ACTION: UPSERT, "g": "b", COUNT: 1},
            {ACTION: DELETE, "g": None, COUNT: 0},
        ],
        key=repr,
    )
