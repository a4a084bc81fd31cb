"""The Delta log read as files (delta-rs writes, no Spark): which files a version range changed,
how many rows that is before any is read, and which files statistics let a keyed read skip."""

import datetime
import os

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from python_helpers.runtime.delta.embedded import change_feed
from python_helpers.runtime.delta.embedded import log as delta_log
from python_helpers.runtime.delta.embedded import tables as delta_tables

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


def test_key_ranges_keep_the_files_of_the_runs_they_cover(tmp_path):
    path = str(tmp_path / "t")
    for keys in ([1, 2], [10, 12], [None, None], [None, 20], [30, 31], [100, 200]):
        write_deltalake(path, pa.table({"k": pa.array(keys, pa.int64())}), mode="append")
    table = DeltaTable(path)
    import pyarrow.parquet as pq

    def contents(files):
        return sorted((tuple(pq.read_table(f).column("k").to_pylist()) for f in files), key=str)

    kept = delta_tables.files_meeting_ranges(table, path, "k", [(11, 11), (25, 40), (None, None)])
    assert contents(kept) == [(10, 12), (30, 31)]
    assert contents(delta_tables.files_meeting_ranges(table, path, "k", [(19, 150)])) == [
        (100, 200),
        (30, 31),
        (None, 20),
    ]
    assert delta_tables.files_meeting_ranges(table, path, "k", []) == []  # no non-null key: no file
    assert delta_tables.files_meeting_ranges(table, path, "k", [(True, True)]) is None  # not comparable
    dates = str(tmp_path / "d")
    write_deltalake(dates, pa.table({"d": pa.array([datetime.date(2024, 1, 1), datetime.date(2024, 1, 9)])}))
    write_deltalake(dates, pa.table({"d": pa.array([datetime.date(2025, 1, 1)])}), mode="append")
    one = [(datetime.date(2024, 1, 5), datetime.date(2024, 2, 1))]
    assert len(delta_tables.files_meeting_ranges(DeltaTable(dates), dates, "d", one)) == 1


_FILES = st.lists(st.lists(st.one_of(st.none(), st.integers(-50, 50)), min_size=1, max_size=4), min_size=1, max_size=5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=_FILES, keys=st.lists(st.one_of(st.none(), st.integers(-60, 60)), max_size=8), slices=st.integers(1, 4))
def test_key_ranges_never_skip_a_file_the_keys_keep(tmp_path_factory, files, keys, slices):
    """Ranges built the way the change's ranges query builds them (the key span cut into equal
    slices, min and max per slice) keep every file that holds a changed key."""
    path = str(tmp_path_factory.mktemp("t"))
    for values in files:
        write_deltalake(path, pa.table({"k": pa.array(values, pa.int64())}), mode="append")
    table = DeltaTable(path)
    present = [k for k in keys if k is not None]
    ranges: dict = {}
    if present:
        lo, hi = min(present), max(present)
        for k in present:
            at = int((k - lo) * slices // (hi - lo + 1))
            a, b = ranges.get(at, (k, k))
            ranges[at] = (min(a, k), max(b, k))
    by_ranges = set(delta_tables.files_meeting_ranges(table, path, "k", list(ranges.values())))
    by_keys = set(delta_tables.files_meeting_keys(table, path, "k", pa.array(keys, pa.int64())))
    assert by_keys <= by_ranges
    import pyarrow.parquet as pq

    for f in delta_tables.file_paths(table, path):
        if set(pq.read_table(f).column("k").to_pylist()) & set(present):
            assert f in by_ranges
