"""Executor-written files on the client side (runtime/connections/files.py): listing what Spark
wrote, and sweeping what killed refreshes left in the Thrift scratch directory."""

from __future__ import annotations

import os
import time

from python_helpers.runtime.connections import files


def test_only_spark_data_files_are_listed(tmp_path):
    for name in ("part-00000-a.snappy.parquet", "part-00001-b.snappy.parquet", "_SUCCESS", ".part-00000-a.crc"):
        (tmp_path / name).write_bytes(b"1234")
    listed = files.parquet_files(str(tmp_path))
    assert [os.path.basename(f.path) for f in listed] == ["part-00000-a.snappy.parquet", "part-00001-b.snappy.parquet"]
    assert all(f.size == 4 and f.modified_ms > 0 for f in listed)
    assert files.parquet_files(str(tmp_path / "missing")) == []


def test_the_sweep_removes_entries_older_than_the_age_only(tmp_path):
    old_dir, old_file, new_dir = tmp_path / "old-result", tmp_path / "old.parquet", tmp_path / "new-result"
    old_dir.mkdir()
    (old_dir / "part-0.parquet").write_bytes(b"x")
    old_file.write_bytes(b"x")
    new_dir.mkdir()
    day_ago = time.time() - 2 * 24 * 3600
    for path in (old_dir, old_file):
        os.utime(path, (day_ago, day_ago))
    assert files.remove_older(str(tmp_path), 24 * 3600) == 2
    assert sorted(os.listdir(tmp_path)) == ["new-result"]
    assert files.remove_older(str(tmp_path / "missing"), 1) == 0


def test_a_dictionary_is_written_for_columns_of_few_values_only(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = 20_000
    data = pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "flag": pa.array([i % 3 == 0 for i in range(rows)]),
            "region": pa.array([None if i % 7 == 0 else f"r{i % 5}" for i in range(rows)]),
            "tags": pa.array([[i % 2] for i in range(rows)]),  # nested: none (settings go by leaf path)
        }
    )
    assert files.dictionary_columns(data) == ["flag", "region"]
    assert files.dictionary_columns(data.slice(0, 0)) == data.column_names
    files.write_parquet(data, str(tmp_path / "out"))
    written = pq.ParquetFile(str(tmp_path / "out" / "part-0.parquet"))
    encodings = {c.path_in_schema: c.encodings for c in (written.metadata.row_group(0).column(i) for i in range(4))}
    assert not any("DICTIONARY" in e for e in encodings["tags.list.element"])
    assert not any("DICTIONARY" in e for e in encodings["id"])
    assert any("DICTIONARY" in e for e in encodings["region"])
    assert written.read().equals(data)
