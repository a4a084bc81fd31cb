"""The Delta log read as files (delta-rs writes, no Spark): which files a version range changed,
how many rows that is before any is read, and which files statistics let a keyed read skip."""

import datetime
import os

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from python_helpers.runtime import change_feed, delta_log, delta_tables

CDF = {"delta.enableChangeDataFeed": "true"}


def test_change_files_of_appends_updates_deletes_and_odd_partition_values(tmp_path):
    path = str(tmp_path / "t with space")
    schema = pa.schema([("id", pa.int64()), ("group", pa.string()), ("p", pa.string())])
    write_deltalake(
        path,
        pa.Table.from_pylist(
            [{"id": i, "group": "g", "p": p} for i, p in enumerate(["a,b", "{c}", "x y", "z/%"])], schema=schema
        ),
        partition_by=["p"],
        configuration=CDF,
    )
    write_deltalake(path, pa.Table.from_pylist([{"id": 9, "group": "h", "p": "{c}"}], schema=schema), mode="append")
    DeltaTable(path).update(updates={'"group"': "'u'"}, predicate="id = 0")
    DeltaTable(path).delete("id = 3")
    files = delta_log.change_files(path, 1, 3)
    kinds = sorted(f.kind for f in files.files)
    assert kinds == ["add", "cdc", "cdc"]  # the append; the update's and the delete's change files
    assert all(os.path.exists(f.path) for f in files.files)  # paths decoded exactly once
    assert change_feed.exact_rows(files.files) == 1 + 2 + 1  # insert; pre+post image; delete
    rows = change_feed._read_in_driver(delta_tables.arrow_schema(DeltaTable(path)), files.files, ["id", "group", "p"])
    got = sorted(zip(rows.column("id").to_pylist(), rows.column("p").to_pylist(), rows.column("__dvm_w").to_pylist()))
    assert got == [(0, "a,b", -1), (0, "a,b", 1), (3, "z/%", -1), (9, "{c}", 1)]


def test_a_missing_commit_is_reported(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": [1]}), configuration=CDF)
    try:
        delta_log.change_files(path, 1, 1)
    except delta_log.CommitMissing:
        return
    raise AssertionError("a version that was never written must not read as an empty change")


def test_statistics_keep_only_files_that_can_hold_the_keys(tmp_path):
    path = str(tmp_path / "t")
    for keys in ([1, 2], [10, 12], [None, None], [None, 20], [30, 31]):
        write_deltalake(path, pa.table({"k": pa.array(keys, pa.int64())}), mode="append")
    table = DeltaTable(path)
    import pyarrow.parquet as pq

    def contents(files):
        return sorted(tuple(pq.read_table(f).column("k").to_pylist()) for f in files)

    kept = delta_tables.files_meeting_keys(table, path, "k", pa.array([12, 31, None], pa.int32()))
    assert contents(kept) == [(10, 12), (30, 31)]  # the NULL-only file and the others skipped
    mixed = delta_tables.files_meeting_keys(table, path, "k", pa.array([20], pa.int64()))
    assert contents(mixed) == [(None, 20)]  # a file with NULLs and values is kept by its values


def test_statistics_that_cannot_decide_read_everything(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"ts": pa.array([datetime.datetime(2024, 1, 1)], pa.timestamp("us"))}))
    keys = pa.array([datetime.datetime(2024, 1, 1)])
    assert delta_tables.files_meeting_keys(DeltaTable(path), path, "ts", keys) is None
    assert delta_tables.files_meeting_keys(DeltaTable(path), path, "nope", pa.array([1])) is None
