"""A materialized intermediate (connections/spark.py, view_of_query(materialize=True)) says
whether it holds rows, and whether a row holds a flag column TRUE, from counts observed while it
is computed, so BoundViews.materialize and an aggregate's rescan do not run a job to ask (a local
session; over Spark Connect it answers None and is asked)."""

from __future__ import annotations

import pytest

from python_helpers.runtime.connections.base import as_connection

pytestmark = [pytest.mark.spark]


@pytest.fixture(autouse=True)
def _patient(monkeypatch):
    """The counts arrive through a listener: waited for longer than a refresh does, so that a
    busy machine does not leave them unknown."""
    from python_helpers.runtime.connections import spark as connections

    monkeypatch.setattr(connections._Observed, "WAIT_SECONDS", 5.0)


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
        told = conn.view_of_query(view, sql, one_partition=one_partition, materialize=True)
        assert told.holds_rows is (rows > 0) and told.flagged is None
        assert spark.sql(f"SELECT COUNT(*) AS n FROM {view}").collect()[0].n == rows
    finally:
        conn.drop_view(view)


@pytest.mark.parametrize(
    ("sql", "flagged"),
    [
        ("SELECT id, id = 3 AS __dvm_rescan FROM range(5)", True),
        ("SELECT id, id > 10 AS __dvm_rescan FROM range(5)", False),
        ("SELECT id, IF(id = 1, NULL, FALSE) AS __dvm_rescan FROM range(5)", False),  # NULL is not TRUE
        ("SELECT id, TRUE AS __dvm_rescan FROM range(5) WHERE id < 0", False),
    ],
)
def test_a_materialized_query_counts_its_flag_while_computed(spark, sql, flagged):
    conn = as_connection(spark)
    view = "__dvm_test_flagged"
    try:
        told = conn.view_of_query(view, sql, materialize=True, flag="__dvm_rescan")
        assert told.flagged is flagged and told.holds_rows is ("< 0" not in sql)
        held = spark.sql(f"SELECT COUNT(*) AS n FROM {view} WHERE __dvm_rescan").collect()[0].n
        assert (held > 0) is flagged
    finally:
        conn.drop_view(view)


def test_a_flag_the_query_lacks_leaves_the_rows_counted(spark):
    conn = as_connection(spark)
    view = "__dvm_test_no_flag"
    try:
        told = conn.view_of_query(view, "SELECT id FROM range(3)", materialize=True, flag="__dvm_rescan")
        assert told.holds_rows is True and told.flagged is None
    finally:
        conn.drop_view(view)
