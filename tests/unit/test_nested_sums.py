"""A consolidation directly below another one is left out (python_helpers/dvm/nested_sums.py):
the outer one must give the same rows as with it, checked against duckdb running both, and
anything that reads the weights or depends on consolidated rows keeps the inner one."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from python_helpers.dvm.sqlgen import Context, consolidate, render

ROWS = st.lists(st.tuples(st.one_of(st.none(), st.integers(-2, 2)), st.integers(-2, 2), st.integers(-2, 2)), max_size=8)

# How the outer consolidation's input is made from one or two inner consolidations ({inner},
# {other}) of the table t(a, b, __dvm_w): the forms that pass the weights through, and forms
# that must keep the inner one (the weights read, a grouping, a join, a limit).
FORMS = [
    ("SELECT a, b, __dvm_w FROM ({inner}) AS m", True),
    ("SELECT a + 1 AS a, b, m.__dvm_w AS __dvm_w FROM ({inner}) AS m WHERE b > {n}", True),
    ("SELECT * FROM ({inner}) AS m WHERE NOT (a IS NULL)", True),
    ("SELECT a, b, __dvm_w FROM ({inner}) AS m UNION ALL SELECT b AS a, a AS b, __dvm_w FROM ({other}) AS o", True),
    ("SELECT a, b, __dvm_w * 2 AS __dvm_w FROM ({inner}) AS m", False),
    ("SELECT a, b, __dvm_w FROM ({inner}) AS m WHERE __dvm_w > 0", False),
    ("SELECT a, b, IF(__dvm_w > 1, 1, 0) AS c, __dvm_w FROM ({inner}) AS m", False),
    ("SELECT a, MAX(b) AS b, 1 AS __dvm_w FROM ({inner}) AS m GROUP BY a", False),
    ("SELECT m.a, o.b, m.__dvm_w FROM ({inner}) AS m JOIN ({other}) AS o ON m.a = o.a", False),
    ("SELECT a, b, __dvm_w FROM ({inner}) AS m ORDER BY a, b LIMIT 2", False),  # (ordered: the same rows each run)
    ("SELECT DISTINCT a, b, __dvm_w FROM ({inner}) AS m", False),
]


def _ctx() -> Context:
    return Context(changes=lambda r: exp.to_table(r), snapshot=lambda r, v: exp.to_table(r))


def _inner(columns: list) -> str:
    return render(consolidate(_ctx(), sqlglot.parse_one("SELECT a, b, __dvm_w FROM t", read="spark"), columns))


def _plain_outer(query: exp.Expr) -> str:
    """The outer consolidation as it was rendered before: over `query` as it is."""
    return f"SELECT a, b, SUM(__dvm_w) AS __dvm_w FROM ({render(query)}) AS z GROUP BY a, b HAVING SUM(__dvm_w) <> 0"


def _rows(db, spark_sql: str) -> list:
    return sorted(db.execute(sqlglot.transpile(spark_sql, read="spark", write="duckdb")[0]).fetchall(), key=repr)


@settings(max_examples=200, deadline=None)
@given(
    rows=ROWS,
    form=st.sampled_from(FORMS),
    inner_columns=st.sampled_from([["a", "b"], ["b", "a"]]),
    n=st.integers(-2, 2),
)
def test_the_outer_consolidation_gives_the_same_rows(rows, form, inner_columns, n):
    text, passes = form
    middle = sqlglot.parse_one(text.format(inner=_inner(inner_columns), other=_inner(["a", "b"]), n=n), read="spark")
    folded = render(consolidate(_ctx(), middle, ["a", "b"], fold=True))
    a, b, w = zip(*rows) if rows else ((), (), ())
    db = duckdb.connect()
    db.register(
        "t", pa.table({"a": pa.array(a, pa.int32()), "b": pa.array(b, pa.int32()), "__dvm_w": pa.array(w, pa.int64())})
    )
    assert _rows(db, folded) == _rows(db, _plain_outer(middle)), folded
    # Passed through: every inner consolidation is gone; otherwise all are kept.
    inner_groups = folded.count("GROUP BY") - 1
    assert inner_groups == (0 if passes else text.count("{inner}") + text.count("{other}") + ("GROUP BY" in text))


def test_a_chain_of_consolidations_keeps_the_outermost():
    ctx = _ctx()
    query = sqlglot.parse_one("SELECT a, b, __dvm_w FROM t", read="spark")
    for _ in range(3):
        query = consolidate(ctx, query, ["a", "b"])
    assert render(query).count("GROUP BY") == 3  # not asked to fold: each is kept
    original = render(query)
    folded = render(consolidate(ctx, query, ["a", "b"], fold=True))
    assert folded.count("GROUP BY") == 1
    assert folded.count("HAVING SUM(__dvm_w) <> 0") == 1
    assert render(query) == original  # the input is not changed


def test_set_level_clauses_and_grouping_sets_keep_the_inner_consolidation():
    inner = _inner(["a", "b"])
    for text in (
        f"SELECT a, b, __dvm_w FROM ({inner}) AS m UNION ALL SELECT a, b, __dvm_w FROM ({inner}) AS n LIMIT 1",
        f"SELECT a, b, __dvm_w FROM ({inner}) AS m UNION SELECT a, b, __dvm_w FROM ({inner}) AS n",
        f"SELECT a, b, IF(__DVM_W > 1, 1, 0) AS c, __dvm_w FROM ({inner}) AS m",
        f"SELECT * FROM ({inner}) AS m TABLESAMPLE (10 PERCENT)",
        "SELECT a, b, __dvm_w FROM (SELECT a, b, SUM(__dvm_w) AS __dvm_w FROM t AS x"
        " GROUP BY a, b WITH ROLLUP HAVING SUM(__dvm_w) <> 0) AS m",
    ):
        middle = sqlglot.parse_one(text, read="spark")
        before = render(middle).count("GROUP BY")
        assert render(consolidate(_ctx(), middle, ["a", "b"], fold=True)).count("GROUP BY") == before + 1, text
