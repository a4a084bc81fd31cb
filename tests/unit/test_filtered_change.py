"""A filter over a changed source that keeps none of its change rows (Context.empty_change):
its branch counts as unchanged, and the delta SQL reads nothing for it."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from python_helpers.dvm.plan_query import query_tree
from python_helpers.dvm.sqlgen import Context, render
from python_helpers.dvm.stored_result import plan_stored_result
from python_helpers.sql.parse import parse_query
from tests.unit.test_shape_sql import ARG_TYPE, SCHEMAS, _bound, _tables

SQL = (
    "SELECT a.k, a.g, b.total FROM src.t1 a JOIN "
    "(SELECT k, SUM(v) AS total FROM src.t2 WHERE dt >= DATE'2024-04-01' GROUP BY k) b ON a.k = b.k"
)


def _merge(changed, consolidated, empty: set, asked: list):
    tree, top_k = query_tree("m", parse_query("m", SQL), SCHEMAS)
    result = plan_stored_result("m", tree, [f"c{i}" for i in range(len(tree.columns))], top_k)
    result.arg_types = {name: ARG_TYPE for name, _ in result.typed_args()}

    def empty_change(relation, key, query):
        asked.append((relation, key, render(query)))
        return relation in empty

    ctx = Context(
        changes=lambda r: exp.to_table(_bound(r, "chg")),
        snapshot=lambda r, v: exp.to_table(_bound(r, v)),
        changed=set(changed),
        consolidated=set(consolidated),
        empty_change=empty_change,
    )
    merge = result.merge_sql(ctx, exp.to_table("stored_result"), {c: "string" for c in result.storage_columns()})
    return None if merge is None else _tables(render(merge))


def test_a_filtered_out_change_is_not_joined_and_alone_leaves_nothing_to_merge():
    both = {"src.t1", "src.t2"}
    asked: list = []
    read = _merge(both, both, {"src.t2"}, asked)
    assert read is not None and _bound("src.t2", "chg") not in read and _bound("src.t2", "old") not in read, read
    assert _bound("src.t1", "chg") in read
    # The question is the filter over the change rows, and only t2's scan has a filter.
    assert {a[0] for a in asked} == {"src.t2"}
    assert all("chg_src_t2" in a[2] and "2024-04-01" in a[2] for a in asked), asked
    assert _merge({"src.t2"}, {"src.t2"}, {"src.t2"}, []) is None
    # Rows kept: differentiated.
    assert _bound("src.t2", "chg") in _merge(both, both, set(), [])


def test_a_recursion_renders_its_steps_again_when_a_filtered_source_is_unchanged():
    """A recursion's delta renders its steps a second time with only the working table changed
    (operators/recursive.py); a step's filtered source that counted as unchanged outside must
    not leave that rendering without a delta."""
    sql = (
        "WITH RECURSIVE r(id, k) AS (SELECT id, k FROM src.t1 WHERE v > 0 UNION ALL "
        "SELECT t2.id, t2.k FROM r JOIN (SELECT id, k FROM src.t2 WHERE g = 'a') t2 ON t2.k = r.id) "
        "SELECT k, COUNT(*) AS c FROM r GROUP BY k"
    )
    tree, top_k = query_tree("m", parse_query("m", sql), SCHEMAS)
    result = plan_stored_result("m", tree, [f"c{i}" for i in range(len(tree.columns))], top_k)
    result.arg_types = {name: ARG_TYPE for name, _ in result.typed_args()}
    ctx = Context(
        changes=lambda r: exp.to_table(_bound(r, "chg")),
        snapshot=lambda r, v: exp.to_table(_bound(r, v)),
        changed={"src.t1", "src.t2"},
        consolidated={"src.t1", "src.t2"},
        empty_change=lambda relation, key, query: relation == "src.t2",
    )
    merge = result.merge_sql(ctx, exp.to_table("stored_result"), {c: "string" for c in result.storage_columns()})
    assert merge is not None
    text = render(merge)
    sqlglot.parse_one(text, read="spark")  # renders SQL Spark's grammar accepts (no empty FROM)
    assert "FROM ()" not in text and _bound("src.t2", "chg") not in _tables(text), text
