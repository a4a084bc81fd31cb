"""The Delta statistics a full refresh written by the executors commits, read from parquet
footers: key-restricted reads skip files by them, so a wrong bound would lose rows."""

from __future__ import annotations

import datetime
import json
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from python_helpers.runtime.delta.embedded.executor_writes import stats_of


def _stats(tmp_path, table: pa.Table, row_group_size: int = 3) -> dict:
    path = tmp_path / "part-0.parquet"
    pq.write_table(table, path, row_group_size=row_group_size)
    meta = pq.read_metadata(path)
    return json.loads(json.dumps(stats_of(meta, meta.schema.to_arrow_schema())))


def test_bounds_of_integers_strings_and_dates_over_row_groups_and_none_for_other_types(tmp_path):
    table = pa.table(
        {
            "nested": pa.array(
                [{"a": 1, "b": [1, 2]}, None, {"a": 3, "b": []}, None, None],
                pa.struct([("a", pa.int32()), ("b", pa.list_(pa.int64()))]),
            ),
            "id": pa.array([5, None, -2, 9, 7], pa.int64()),
            "name": pa.array(["m", "b", None, "z", "k"]),
            "day": pa.array([datetime.date(2024, 1, 2), None, datetime.date(1999, 12, 31), None, None]),
            "price": pa.array([1.5, 2.5, None, 0.5, 3.0]),
            "at": pa.array([datetime.datetime(2024, 1, 1)] * 5, pa.timestamp("us", tz="UTC")),
            "tags": pa.array([["x"], [], None, ["y"], ["z"]]),
        }
    )
    stats = _stats(tmp_path, table)
    assert stats["numRecords"] == 5
    assert stats["minValues"] == {"id": -2, "name": "b", "day": "1999-12-31"}
    assert stats["maxValues"] == {"id": 9, "name": "z", "day": "2024-01-02"}
    # Counts of NULLs for every flat column; none for nested ones (their leaves are not the column).
    assert stats["nullCount"] == {"id": 1, "name": 1, "day": 3, "price": 1, "at": 0}


def test_a_column_of_nulls_only_has_a_null_count_and_no_bounds(tmp_path):
    stats = _stats(tmp_path, pa.table({"k": pa.array([None, None], pa.int32()), "v": pa.array([1, 2])}))
    assert stats["nullCount"] == {"k": 2, "v": 0}
    assert "k" not in stats["minValues"] and stats["minValues"]["v"] == 1


@settings(max_examples=25, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=30),
    group=st.integers(1, 7),
)
def test_integer_bounds_hold_every_value(tmp_path_factory, values, group):
    stats = _stats(tmp_path_factory.mktemp("p"), pa.table({"k": pa.array(values, pa.int64())}), group)
    present = [v for v in values if v is not None]
    assert stats["nullCount"]["k"] == len(values) - len(present)
    if present:
        assert stats["minValues"]["k"] == min(present) and stats["maxValues"]["k"] == max(present)
    else:
        assert "k" not in stats["minValues"]


def test_a_file_spark_names_is_found_by_its_log_path():
    from python_helpers.runtime.delta.embedded.executor_merge import _relative

    log_paths = ["part-0001.parquet", "merge-ab12/part-0002.parquet", "full-cd34/p%3D1/part-0003.parquet"]
    by_text = {unquote(p): p for p in log_paths}
    depth = max(t.count("/") + 1 for t in by_text)
    root = "file:///data/warehouse/a%20b.db/__dvm_stream_tables/facts"
    assert _relative(f"{root}/part-0001.parquet", by_text, depth) == "part-0001.parquet"
    assert _relative(f"{root}/merge-ab12/part-0002.parquet", by_text, depth) == "merge-ab12/part-0002.parquet"
    # Spark encodes what the log encodes too; the lookup compares decoded text
    assert _relative(f"{root}/full-cd34/p%3D1/part-0003.parquet", by_text, depth) == log_paths[2]
    # a file of another table (or of a directory deeper than any in the log) is no file of this one
    assert _relative(f"{root}/merge-zz/part-0009.parquet", by_text, depth) is None
    assert _relative("part-0002.parquet", by_text, depth) is None


def test_the_touched_files_query_broadcasts_few_merge_rows():
    from python_helpers.runtime.delta.embedded.executor_merge import _touched_query

    few = _touched_query("ids", "rows", ["__dvm_row_id"], broadcast=True)
    many = _touched_query("ids", "rows", ["__dvm_row_id"], broadcast=False)
    assert few.startswith("SELECT /*+ BROADCAST(m) */ ") and "BROADCAST" not in many
    assert few.replace("/*+ BROADCAST(m) */ ", "") == many
