"""A materialized intermediate (connections/spark.py, view_of_query(materialize=True)) says
whether it holds rows from a count observed while it is computed, so BoundViews.materialize
does not run a job to ask (a local session; over Spark Connect it answers None and is asked)."""

from __future__ import annotations

import pytest

from python_helpers.runtime.connections.base import as_connection

pytestmark = [pytest.mark.spark]


@pytest.mark.parametrize(
    ("sql", "rows", "one_partition"),
    [
        ("SELECT id FROM range(5)", 5, False),
        ("SELECT id FROM range(5) WHERE id > 10", 0, False),
        ("SELECT id % 2 AS g, COUNT(*) AS n FROM range(10) GROUP BY id % 2", 2, False),
        ("SELECT id % 2 AS g, COUNT(*) AS n FROM range(10) WHERE id < 0 GROUP BY id % 2", 0, True),
        ("SELECT 1 AS x WHERE FALSE", 0, False),
    ],
)
def test_a_materialized_query_says_whether_it_holds_rows_without_asking(spark, sql, rows, one_partition):
    conn = as_connection(spark)
    view = "__dvm_test_materialized"
    try:
        assert conn.view_of_query(view, sql, one_partition=one_partition, materialize=True) is (rows > 0)
        assert spark.sql(f"SELECT COUNT(*) AS n FROM {view}").collect()[0].n == rows
    finally:
        conn.drop_view(view)
