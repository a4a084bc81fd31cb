"""How the embedded engine's reads of a Delta version's files reach Parquet: without the
dictionary filter (connections/base.py, NO_DICTIONARY_FILTER), on files written as the embedded
engine and delta-rs write them, and still with the right rows under a key filter; and rows read
in the dbt process reach Spark whole."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from python_helpers.runtime.connections.base import LISTING_THRESHOLD, NO_DICTIONARY_FILTER, as_connection

pytestmark = [pytest.mark.spark]


def _relation_options(spark, view: str) -> dict:
    """The options of the file relation under a temporary view, as Spark's analysis holds them
    (the options that reach the Parquet reader's Hadoop configuration)."""
    plan = spark.table(view)._jdf.queryExecution().analyzed()
    leaves = plan.collectLeaves()
    assert leaves.size() == 1
    options = leaves.head().relation().options()
    return {key: options.get(key).get() for key in NO_DICTIONARY_FILTER if options.contains(key)}


def test_a_key_filtered_read_of_delta_rs_files_skips_the_dictionary_filter(spark, tmp_path):
    path = str(tmp_path / "orders")
    ids = list(range(200_000))
    table = pa.table(
        {"order_id": pa.array(ids, pa.int64()), "customer_id": pa.array([(i * 7919) % 50_000 for i in ids], pa.int32())}
    )
    write_deltalake(path, table)
    files = DeltaTable(path).file_uris()
    conn = as_connection(spark)
    view = "__dvm_test_file_scan"
    conn.view_of_files(view, files, table.schema, columns=["order_id", "customer_id"])
    try:
        assert _relation_options(spark, view) == NO_DICTIONARY_FILTER
        rows = spark.sql(f"SELECT order_id FROM {view} WHERE customer_id IN (7919, 15838) ORDER BY 1").collect()
        expected = sorted(i for i in ids if (i * 7919) % 50_000 in (7919, 15838))
        assert [r.order_id for r in rows] == expected
    finally:
        conn.drop_view(view)


def test_a_read_of_many_local_files_lists_them_without_a_spark_job_and_puts_the_setting_back(spark, tmp_path):
    """Past 32 paths Spark lists a read's files with a job of its own (0.5 s for 39 files here);
    a Delta version's local files are listed in the driver (connections/base.py,
    LISTING_THRESHOLD), and the session's own setting is back afterwards."""
    path = str(tmp_path / "many")
    for part in range(40):
        table = pa.table({"k": pa.array([part], pa.int64())})
        write_deltalake(path, table, mode="append")
    files = DeltaTable(path).file_uris()
    assert len(files) == 40
    conn = as_connection(spark)
    own = conn.conf(LISTING_THRESHOLD, None)
    group = "__dvm_test_listing"
    view = "__dvm_test_many_files"
    spark.sparkContext.setJobGroup(group, "listing")
    try:
        conn.view_of_files(view, files, table.schema)
        listing_jobs = list(spark.sparkContext.statusTracker().getJobIdsForGroup(group))
    finally:
        spark.sparkContext.setJobGroup("", "")
    try:
        assert listing_jobs == []
        assert conn.conf(LISTING_THRESHOLD, None) == own
        assert sorted(r.k for r in spark.sql(f"SELECT k FROM {view}").collect()) == list(range(40))
    finally:
        conn.drop_view(view)


def test_rows_handed_over_in_chunks_with_empty_ones_all_reach_spark(spark):
    """pyspark 4.1 built a frame of 1 row from chunks of 1, 0 and 2 rows (the rows after an
    empty chunk were gone); tables concatenated from per-file reads have such chunks."""
    parts = [pa.table({"k": pa.array(list(range(n)), pa.int64())}) for n in (1, 0, 2, 0, 0, 3)]
    data = pa.concat_tables(parts)
    assert [len(c) for c in data.column("k").chunks] == [1, 0, 2, 0, 0, 3]
    conn = as_connection(spark)
    view = "__dvm_test_chunks"
    conn.view_of_arrow(view, data)
    try:
        assert sorted(r.k for r in spark.sql(f"SELECT k FROM {view}").collect()) == [0, 0, 0, 1, 1, 2]
    finally:
        conn.drop_view(view)
