"""The SQL of every operator shape, without Spark: each shape of tests/support/shapes.py is
planned, and its full build, its delta and its MERGE rows are rendered over abstract relations
for every combination of changed sources, then parsed back as Spark SQL. A rewrite or a delta
rule that crashes, renders SQL Spark's grammar rejects, or reads a relation nobody bound fails
here in seconds; what the SQL computes is the oracle's job (tests/spark/test_operators_oracle.py).
"""

from __future__ import annotations

import itertools

import pytest
import sqlglot
from sqlglot import exp

from python_helpers.dvm.plan_query import query_tree
from python_helpers.dvm.sqlgen import Context, render
from python_helpers.dvm.stored_result import plan_stored_result
from python_helpers.sql.parse import parse_query
from tests.support.shapes import SHAPES

SOURCE_TYPES = {
    "id": "bigint",
    "k": "int",
    "g": "string",
    "v": "int",
    "x": "double",
    "d": "decimal(12,2)",
    "dt": "date",
}
SCHEMAS = {f"src.{t}": dict(SOURCE_TYPES) for t in ("t1", "t2", "t3")}
# The aggregate arguments' types Spark's analysis would report, by the kind of expression.
ARG_TYPE = "double"


def _bound(relation: str, what: str) -> str:
    return f"{what}_{relation.replace('.', '_')}"


def _context(changed, materialized: list | None = None) -> Context:
    """Relations named by what they stand for; with `materialized`, intermediates are computed
    once as the engines do (each query recorded, served as the relation mat_<n>)."""

    def materialize(query):
        assert materialized is not None
        materialized.append(query)
        return exp.select("*").from_(f"mat_{len(materialized)}")

    return Context(
        changes=lambda r: exp.to_table(_bound(r, "chg")),
        snapshot=lambda r, v: exp.to_table(_bound(r, v)),
        changed=set(changed),
        materialize=materialize if materialized is not None else None,
    )


def _tables(text: str) -> set:
    tree = sqlglot.parse_one(text, read="spark")
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    return {t.name for t in tree.find_all(exp.Table) if t.name not in ctes}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_shape_renders_build_delta_and_merge_sql(shape):
    sql = shape.sql.replace("{src}", "src")
    tree, top_k = query_tree(shape.name, parse_query(shape.name, sql), SCHEMAS)
    names = [f"c{i}" for i in range(len(tree.columns))]
    result = plan_stored_result(shape.name, tree, names, top_k)
    result.arg_types = {name: ARG_TYPE for name, _ in result.typed_args()}
    relations = [f"src.{t}" for t in shape.tables]
    snapshots = {_bound(r, v) for r in relations for v in ("old", "new")}
    changes = {_bound(r, "chg") for r in relations}

    build = render(result.full_sql(_context(set())))
    assert _tables(build) <= {_bound(r, "new") for r in relations}, build

    store = exp.to_table("stored_result")
    for n in range(1, len(relations) + 1):
        for changed in itertools.combinations(relations, n):
            # As the engines render it: intermediates computed once (each checked too).
            materialized: list = []
            merge = result.merge_sql(
                _context(changed, materialized), store, {c: "string" for c in result.storage_columns()}
            )
            assert merge is not None, f"{shape.name}: no MERGE rows for a change of {changed}"
            texts = [render(q) for q in [merge, *materialized]]
            read = set().union(*(_tables(t) for t in texts)) - {f"mat_{i + 1}" for i in range(len(materialized))}
            assert read <= snapshots | changes | {store.name}, (changed, read - snapshots - changes, texts)
            # An unchanged source is read at its new version only (its old rows are the same).
            unchanged = set(relations) - set(changed)
            assert not {_bound(r, "old") for r in unchanged} & read, (changed, read)
            # A changed source is seen: its change is read, or the operator over it is recomputed
            # at both versions (no key to restrict it by).
            for r in changed:
                assert _bound(r, "chg") in read or {_bound(r, "old"), _bound(r, "new")} <= read, (r, texts)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_plan_digest_of_every_shape_is_the_same_when_planned_again(shape):
    """The digest the stored metadata carries (runtime/refresh/attempt.plan_digest): a refresh
    plans the query again in each process, and an equal plan must give an equal digest, or every
    refresh would rebuild."""
    from python_helpers.runtime.refresh.attempt import plan_digest

    def planned():
        sql = shape.sql.replace("{src}", "src")
        tree, top_k = query_tree(shape.name, parse_query(shape.name, sql), SCHEMAS)
        result = plan_stored_result(shape.name, tree, [f"c{i}" for i in range(len(tree.columns))], top_k)
        result.arg_types = {name: ARG_TYPE for name, _ in result.typed_args()}
        return result

    first, again = plan_digest(planned()), plan_digest(planned())
    assert first == again and first.startswith(planned().kind + ":")
