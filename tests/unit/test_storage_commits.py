"""Refresh commits on real Delta tables (delta-rs, no Spark): every commit that moves the
offsets conflicts with any other refresh commit made since the version it read."""

import itertools
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake.transaction import AddAction

from python_helpers.runtime.delta.embedded import storage

ROWS = pa.table({"__dvm_row_id": ["a", "b"], "v": [1, 2]})
_WRITES = itertools.count()


def _full(path, metadata, read_version):
    """A full refresh's commit: the rows as a file in a directory of its own under the table (as
    the executors write them), committed with the metadata."""
    directory = f"full-{next(_WRITES)}"
    os.makedirs(os.path.join(path, directory), exist_ok=True)
    file = os.path.join(path, directory, "part-0.parquet")
    pq.write_table(ROWS, file)
    add = AddAction(f"{directory}/part-0.parquet", os.path.getsize(file), {}, 0, True, json.dumps({"numRecords": 2}))
    return storage.commit_files(path, ROWS.schema, [add], metadata, read_version)


def _built(tmp_path):
    path = str(tmp_path / "stored")
    _full(path, {"offsets": {"s.t": {"version": 1}}}, None)
    return path


def _upsert(path, read_version, row_id, value, offset, action="U", match=("__dvm_row_id",)):
    """One merge row applied, `action` 'U' (met by the row id), or 'I': an insert, as a bag's
    refresh whose change only added rows has (met by nothing)."""
    rows = pa.table({"__dvm_row_id": [row_id], "v": [value], "__dvm_action": [action]})
    return storage.merge_rows(
        path,
        rows,
        ["__dvm_row_id", "v"],
        list(match),
        {"offsets": {"s.t": {"version": offset}}},
        read_version,
    )


def test_offsets_only_commit_loses_to_a_concurrent_merge(tmp_path):
    path = _built(tmp_path)
    read = storage.read_metadata(path)["read_version"]
    _upsert(path, read, "c", 3, offset=5)  # a rival refresh that inserted a row commits first
    with pytest.raises(storage.ConcurrentCommit):
        storage.commit_offsets_only(path, {"offsets": {"s.t": {"version": 6}}}, read)
    assert storage.read_metadata(path)["offsets"]["s.t"]["version"] == 5


def test_merge_loses_to_a_concurrent_offsets_only_commit(tmp_path):
    path = _built(tmp_path)
    read = storage.read_metadata(path)["read_version"]
    storage.commit_offsets_only(path, {"offsets": {"s.t": {"version": 6}}}, read)
    with pytest.raises(storage.ConcurrentCommit):
        _upsert(path, read, "c", 3, offset=5)
    assert storage.read_metadata(path)["offsets"]["s.t"]["version"] == 6


def _append(path, read_version, row_id, value, offset):
    return _upsert(path, read_version, row_id, value, offset, action="I", match=("v",))


def test_an_append_of_inserts_commits_with_the_offsets_and_loses_to_a_rival(tmp_path):
    path = _built(tmp_path)
    read = storage.read_metadata(path)["read_version"]
    assert _append(path, read, "a", 1, offset=4) == {"num_target_rows_inserted": 1}
    assert storage.read_metadata(path)["offsets"]["s.t"]["version"] == 4
    assert storage.open_table(path).history(1)[0]["operation"] == "WRITE"  # no MERGE
    # Two refreshes that read the same version: the second append loses, nothing written.
    read = storage.read_metadata(path)["read_version"]
    _append(path, read, "c", 3, offset=5)
    with pytest.raises(storage.ConcurrentCommit):
        _append(path, read, "d", 4, offset=6)
    assert storage.read_metadata(path)["offsets"]["s.t"]["version"] == 5
    assert sorted(storage.open_table(path).to_pyarrow_table().column("v").to_pylist()) == [1, 1, 2, 3]


def test_full_rewrite_loses_to_any_refresh_commit_since_its_read(tmp_path):
    path = _built(tmp_path)
    read = storage.read_metadata(path)["read_version"]
    _upsert(path, read, "a", 10, offset=5)
    with pytest.raises(storage.ConcurrentCommit):
        _full(path, {"offsets": {"s.t": {"version": 7}}}, read)


def test_two_first_builds_one_wins(tmp_path):
    path = str(tmp_path / "stored")
    _full(path, {"offsets": {"s.t": {"version": 1}}}, None)
    with pytest.raises(storage.ConcurrentCommit):
        _full(path, {"offsets": {"s.t": {"version": 2}}}, None)
    assert storage.read_metadata(path)["offsets"]["s.t"]["version"] == 1


def test_a_merge_writes_compressed_row_groups_spark_can_split_between_tasks(tmp_path, monkeypatch):
    """delta-rs writes up to about a million rows per row group, and Spark splits a file only at
    row groups: the files a MERGE rewrites keep groups of storage.ROW_GROUP_ROWS rows, compressed
    as Spark writes them (delta-rs leaves them uncompressed once given writer properties)."""
    monkeypatch.setattr(storage, "ROW_GROUP_ROWS", 1_000)
    path = str(tmp_path / "stored")
    n = 5_000
    rows = pa.table({"__dvm_row_id": [f"r{i:05d}" for i in range(n)], "v": list(range(n))})
    os.makedirs(os.path.join(path, "full-0"))
    file = os.path.join(path, "full-0", "part-0.parquet")
    pq.write_table(rows, file)  # one row group, as a small full write has
    add = AddAction("full-0/part-0.parquet", os.path.getsize(file), {}, 0, True, json.dumps({"numRecords": n}))
    storage.commit_files(path, rows.schema, [add], {"offsets": {"s.t": {"version": 1}}}, None)
    _upsert(path, storage.read_metadata(path)["read_version"], "r00007", -1, offset=2)
    from deltalake import DeltaTable

    groups = [pq.ParquetFile(f).metadata for f in DeltaTable(path).file_uris()]
    assert sum(m.num_rows for m in groups) == n
    assert all(m.row_group(i).num_rows <= 1_000 for m in groups for i in range(m.num_row_groups))
    assert sum(m.num_row_groups for m in groups) >= 5
    codecs = {m.row_group(i).column(c).compression for m in groups for i in range(m.num_row_groups) for c in range(2)}
    assert codecs == {"SNAPPY"}
