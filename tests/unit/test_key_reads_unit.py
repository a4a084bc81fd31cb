"""A source's rows for a few computed keys, read with Arrow (runtime/delta/embedded/key_reads.py):
never fewer rows than meet a key null-safely, in the table's types, across files of different
physical schemas (string_view as delta-rs writes, a column added later) and row groups."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from python_helpers.runtime.delta.embedded import key_reads

SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int32()), ("name", pa.string()), ("day", pa.date32())])


def _write(tmp_path, name: str, table: pa.Table, row_group_size: int = 4) -> str:
    path = str(tmp_path / name)
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def _rows(ids, ks, days=None, view=False) -> pa.Table:
    names = pa.array([f"n{i}" for i in ids], pa.string_view() if view else pa.string())
    days = days if days is not None else [datetime.date(2024, 1, 1 + i % 28) for i in ids]
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "k": pa.array(ks, pa.int32()), "name": names, "day": pa.array(days)}
    )


def _meeting(table: pa.Table, column: str, keys: list) -> list:
    """The ids of the rows whose `column` meets one of `keys` null-safely (the restriction)."""
    values = table.column(column).to_pylist()
    return sorted(i for i, v in zip(table.column("id").to_pylist(), values) if v in keys)


@settings(max_examples=60, deadline=None)
@given(
    ks=st.lists(st.one_of(st.none(), st.integers(-3, 6)), min_size=0, max_size=40),
    keys=st.lists(st.one_of(st.none(), st.integers(-3, 6)), min_size=1, max_size=5),
    cut=st.integers(0, 40),
)
def test_a_key_read_keeps_every_row_meeting_a_key(tmp_path_factory, ks, keys, cut):
    tmp_path = tmp_path_factory.mktemp("keys")
    table = _rows(list(range(len(ks))), ks)
    cut = min(cut, len(ks))
    # Two files: one as Spark writes strings, one as delta-rs does (string_view).
    files = [
        _write(tmp_path, "a.parquet", table.slice(0, cut)),
        _write(tmp_path, "b.parquet", _rows(list(range(cut, len(ks))), ks[cut:], view=True)),
    ]
    read = key_reads.read(files, SCHEMA, ["id", "k", "name"], {"k": pa.array(keys, pa.int32())})
    assert read is not None
    assert read.schema == pa.schema([SCHEMA.field(c) for c in ("id", "k", "name")])
    got = read.column("id").to_pylist()
    assert len(got) == len(set(got))  # each stored row once
    assert sorted(got) == _meeting(table, "k", keys)
    assert read.column("name").to_pylist() == [f"n{i}" for i in got]


def test_keys_of_another_integer_type_dates_and_out_of_range_values(tmp_path):
    table = _rows([0, 1, 2, 3], [1, 2, 2**31 - 1, 5])
    files = [_write(tmp_path, "a.parquet", table)]
    # bigint keys against an int column: one too large for it meets no row (and is no error).
    read = key_reads.read(files, SCHEMA, ["id"], {"k": pa.array([2, 2**40, 2**31 - 1], pa.int64())})
    assert sorted(read.column("id").to_pylist()) == [1, 2]
    days = pa.array([datetime.date(2024, 1, 2)], pa.date32())
    read = key_reads.read(files, SCHEMA, ["id"], {"day": days})
    assert read.column("id").to_pylist() == [1]
    # Two key columns: each filters (a superset of the key rows, restricted exactly later).
    read = key_reads.read(files, SCHEMA, ["id"], {"k": pa.array([1, 5]), "day": days})
    assert read.num_rows == 0


def test_strings_are_not_filtered_and_say_so(tmp_path):
    assert not key_reads.filterable(SCHEMA, ["name"])
    assert key_reads.filterable(SCHEMA, ["name", "k"])
    assert key_reads.wanted(SCHEMA, {"name": pa.array(["n1"])}) == {}


def test_a_column_added_later_is_null_in_older_files(tmp_path):
    old = pa.table({"id": pa.array([0, 1], pa.int64()), "k": pa.array([7, 8], pa.int32())})
    new = _rows([2, 3], [7, 9])
    files = [_write(tmp_path, "old.parquet", old), _write(tmp_path, "new.parquet", new)]
    read = key_reads.read(files, SCHEMA, ["id", "name"], {"k": pa.array([7], pa.int32())})
    assert sorted(zip(read.column("id").to_pylist(), read.column("name").to_pylist())) == [(0, None), (2, "n2")]


def test_too_many_rows_give_up(tmp_path, monkeypatch):
    monkeypatch.setattr(key_reads, "MAX_ROWS", 3)
    files = [_write(tmp_path, "a.parquet", _rows(list(range(10)), [1] * 10))]
    assert key_reads.read(files, SCHEMA, ["id"], {"k": pa.array([1], pa.int32())}) is None
    assert key_reads.read(files, SCHEMA, ["id"], {"k": pa.array([2], pa.int32())}).num_rows == 0
    # Counted over all files together, whichever thread reads them.
    files = [_write(tmp_path, f"f{i}.parquet", _rows([2 * i, 2 * i + 1], [1, 2])) for i in range(4)]
    assert key_reads.read(files[:3], SCHEMA, ["id"], {"k": pa.array([1], pa.int32())}).num_rows == 3
    assert key_reads.read(files, SCHEMA, ["id"], {"k": pa.array([1], pa.int32())}) is None


@pytest.mark.parametrize("null_key", [False, True])
def test_a_null_key_meets_the_null_rows(tmp_path, null_key):
    files = [_write(tmp_path, "a.parquet", _rows([0, 1, 2], [None, 1, 2]))]
    keys = pa.array([1, None] if null_key else [1], pa.int32())
    read = key_reads.read(files, SCHEMA, ["id"], {"k": keys})
    assert sorted(read.column("id").to_pylist()) == ([0, 1] if null_key else [1])
    assert pc.all(pc.is_valid(read.column("id"))).as_py()


@pytest.mark.parametrize("null_key", [False, True])
def test_a_file_without_the_key_column_meets_only_a_null_key(tmp_path, null_key):
    # A file written before the key column was added holds NULL there: no row of it meets a
    # non-null key, and every row meets a NULL one.
    old = pa.table({"id": pa.array([0, 1], pa.int64())})
    files = [_write(tmp_path, "old.parquet", old), _write(tmp_path, "new.parquet", _rows([2, 3], [7, 9]))]
    keys = pa.array([7, None] if null_key else [7], pa.int32())
    read = key_reads.read(files, SCHEMA, ["id"], {"k": keys})
    assert sorted(read.column("id").to_pylist()) == ([0, 1, 2] if null_key else [2])
