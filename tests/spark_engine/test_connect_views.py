"""Over Spark Connect, a refresh's views of rows the dbt process sent and of checkpoints are
held by the connection and sent with each statement that names them (connections/spark.py,
SparkConnection._views_named): no temporary view is created or dropped on the server for
them. The server here is the spark engine suite's (Delta loaded); these tests use the embedded
engine and plain Spark only.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from python_helpers.runtime.connections.base import as_connection
from tests.support.harness import run_cycles
from tests.support.shapes import INITIAL, SHAPES, SMOKE_BATCHES

pytestmark = pytest.mark.spark

ROWS = pa.table({"k": pa.array([1, 2, 2, 3], pa.int64()), "v": pa.array([1.5, None, 2.5, 4.0])})


def _server_views(spark) -> set:
    return {r.viewName.lower() for r in spark.sql("SHOW VIEWS").collect() if r.isTemporary}


def test_rows_and_checkpoints_are_sent_with_the_statements_that_read_them(delta_spark, tmp_path):
    conn = as_connection(delta_spark)
    rows, grouped, kept = "__dvm_cv_rows", "__dvm_cv_grouped", "__dvm_cv_kept"
    try:
        conn.view_of_arrow(rows, ROWS, one_partition=True)
        assert rows not in _server_views(delta_spark)
        assert sorted(conn.rows(f"SELECT k, v FROM {rows}"), key=str) == sorted(
            [(1, 1.5), (2, None), (2, 2.5), (3, 4.0)], key=str
        )
        assert conn.records(f"SELECT COUNT(*) AS n FROM {rows.upper()}") == [{"n": 4}]
        assert [c.name for c in conn.output_columns(f"SELECT k FROM {rows}")] == ["k"]

        # A checkpoint is held too; a query over held views that is not materialized becomes a
        # server view (its plan carries the rows it reads).
        told = conn.view_of_query(grouped, f"SELECT k, SUM(v) AS s FROM {rows} GROUP BY k", materialize=True)
        assert told.holds_rows is None
        conn.view_of_query(kept, f"SELECT k FROM {grouped} WHERE s IS NOT NULL")
        assert grouped not in _server_views(delta_spark) and kept in _server_views(delta_spark)
        table = conn.arrow(f"SELECT g.k, g.s FROM {grouped} g JOIN {kept} USING (k) ORDER BY k", names=["key", "sum"])
        assert table.to_pydict() == {"key": [1, 2, 3], "sum": [1.5, 2.5, 4.0]}

        # A statement reads them as a query does.
        out = str(tmp_path / "out")
        conn.execute(f"INSERT OVERWRITE DIRECTORY '{out}' USING parquet SELECT k, v FROM {rows} WHERE k = 2")
        assert delta_spark.read.parquet(out).count() == 2
    finally:
        for name in (kept, grouped, rows):
            conn.drop_view(name)
    assert not {rows, grouped, kept} & _server_views(delta_spark)
    with pytest.raises(Exception, match="(?i)cannot be found|not found|TABLE_OR_VIEW"):
        conn.rows(f"SELECT * FROM {rows}")


def test_embedded_refreshes_over_connect_equal_the_recompute(delta_env):
    """The embedded engine's change rows and materialized intermediates, held this way, through
    the oracle: an aggregate over a join, and nested outer joins whose keys are materialized."""
    chosen = ("join_agg", "left_then_inner")
    for t in ("t1", "t2", "t3"):
        delta_env.source(t, INITIAL[t])
    streams = [
        delta_env.stream(s.name, s.sql, engine="embedded", refresh_mode="differential")
        for s in SHAPES
        if s.name in chosen
    ]
    assert len(streams) == len(chosen)
    run_cycles(delta_env, streams, SMOKE_BATCHES[:2])
