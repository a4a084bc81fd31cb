"""How the embedded engine's reads of a Delta version's files reach Parquet: without the
dictionary filter (connections/base.py, NO_DICTIONARY_FILTER), on files written as the embedded
engine and delta-rs write them, and still with the right rows under a key filter."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from python_helpers.runtime.connections.base import NO_DICTIONARY_FILTER, as_connection

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
