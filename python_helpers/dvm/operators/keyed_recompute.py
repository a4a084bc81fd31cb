"""Aggregate and Distinct below the root: recompute the affected keys before and after.

Δ(γ_K(R)) = γ_K(R_new ⋉ keys(ΔR)) − γ_K(R_old ⋉ keys(ΔR)), consolidated: groups whose value did
not change cancel. Only groups whose key appears in the delta are rescanned (delta key
restriction); Spark pushes the semi join below the aggregation on the grouping keys. An
aggregate without keys recomputes its single row when its input changed at all.

When the input is a changed plain source (or filters and projections of one) and the change is
small, the input is read once: its rows of the changed keys at the new version are computed
first, and its old rows are those minus the change (restricted_reads), instead of a second scan.

At the root, the stored result keeps each group's state instead (python_helpers.dvm.stored_result),
which avoids the rescan of the old version.
"""

from __future__ import annotations

from sqlglot import exp

from python_helpers.dvm.operators import restricted_reads
from python_helpers.dvm.operators.base import UnaryOperator, Walk, only_child
from python_helpers.dvm.sqlgen import (
    Context,
    alias,
    col,
    consolidate,
    select_from,
    semi_join,
    sub,
    union_all_of,
)
from python_helpers.dvm.tree import WEIGHT, Aggregate, Distinct, Node


def aggregate_plain(node: Aggregate, ctx: Context, version: str, child_sql) -> exp.Select:
    a = ctx.alias("g")
    cols = [alias(k.copy(), n) for k, n in zip(node.keys, node.key_names)]
    cols += [alias(agg.expr.copy(), agg.name) for agg in node.aggs]
    query = select_from(cols, sub(child_sql, a))
    if node.keys:
        query = query.group_by(*[k.copy() for k in node.keys], copy=False)
    return query


def distinct_plain(node: Distinct, ctx: Context, version: str, child_sql) -> exp.Select:
    return select_from([col(c) for c in node.columns], sub(child_sql, ctx.alias("d"))).distinct(copy=False)


def recompute_delta(node, ctx: Context, child_delta, plain_old, plain_new):
    """Shared by Aggregate and Distinct; plain_old/new render the node at each version."""
    if child_delta is None:
        return None
    if isinstance(node, Aggregate):
        key_cols, key_exprs = node.key_names, node.keys
    else:
        key_cols, key_exprs = node.columns, [col(c) for c in node.columns]
    sides = []
    for sign, render in ((1, plain_new), (-1, plain_old)):
        out = render()
        if key_cols:
            d = ctx.alias("dk")
            keys = select_from(
                [alias(e.copy(), n) for e, n in zip(key_exprs, key_cols)], sub(child_delta.copy(), d)
            ).distinct(copy=False)
            out = semi_join(ctx.alias("s"), out, key_cols, keys, ctx)
        sides.append(
            select_from(
                [col(c) for c in node.columns] + [alias(exp.Literal.number(sign), WEIGHT)], sub(out, ctx.alias("v"))
            )
        )
    return consolidate(ctx, union_all_of(sides), node.columns)


def _key_exprs(node) -> list:
    """The node's grouping key as expressions over its input's columns ([] for a global aggregate)."""
    return list(node.keys) if isinstance(node, Aggregate) else [col(c) for c in node.columns]


def read_once_delta(node, ctx: Context, child: Node, child_delta, child_new) -> exp.Expr:
    """recompute_delta over an input read once: its rows of the changed keys at the new version,
    computed first, and its old rows those minus its change (restricted_reads)."""
    exprs = _key_exprs(node)
    keys = restricted_reads.keys_of(ctx, child_delta, exprs)
    rows = restricted_reads.read_for_keys(ctx, child, "new", exprs, keys) or child_new
    new = ctx.materialize(restricted_reads.restrict(ctx, rows, exprs, keys))  # type: ignore[misc]
    rows = {"new": new, "old": restricted_reads.minus_change(ctx, child.columns, new, child_delta)}
    render = aggregate_plain if isinstance(node, Aggregate) else distinct_plain
    return restricted_reads.new_minus_old(ctx, node.columns, lambda version: render(node, ctx, version, rows[version]))


class _KeyedRecomputeOperator(UnaryOperator):
    """Recomputed for the keys its input's change touches, at both versions (recompute_delta);
    a changed plain source below is read once (read_once_delta)."""

    @classmethod
    def delta(cls, node: Node, ctx: Context, walk: Walk) -> exp.Expr | None:
        child = only_child(node)
        child_delta = walk.delta(child)
        if _key_exprs(node) and restricted_reads.from_change(ctx, child, child_delta):
            return read_once_delta(node, ctx, child, child_delta, walk.plain(child, "new"))
        return recompute_delta(node, ctx, child_delta, lambda: walk.plain(node, "old"), lambda: walk.plain(node, "new"))


class AggregateOperator(_KeyedRecomputeOperator):
    nodes = (Aggregate,)

    @classmethod
    def over(cls, node: Node, ctx: Context, version: str, child_sql: exp.Expr) -> exp.Expr:
        assert isinstance(node, Aggregate)
        return aggregate_plain(node, ctx, version, child_sql)


class DistinctOperator(_KeyedRecomputeOperator):
    nodes = (Distinct,)

    @classmethod
    def over(cls, node: Node, ctx: Context, version: str, child_sql: exp.Expr) -> exp.Expr:
        assert isinstance(node, Distinct)
        return distinct_plain(node, ctx, version, child_sql)
