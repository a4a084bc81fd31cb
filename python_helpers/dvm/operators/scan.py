"""Scan: a Delta source. Linear: the delta is the change feed, mapped to weights.

Only the columns the query reads are projected before consolidation, so an update that touched
no referenced column cancels to nothing right here and never reaches a join.
"""

from __future__ import annotations

from sqlglot import exp

from python_helpers.dvm.operators.base import Operator, Walk
from python_helpers.dvm.sqlgen import Context, alias, col, consolidate, repeat_rows, select_from, weight
from python_helpers.dvm.tree import WEIGHT, Node, Scan


def _columns(node: Scan):
    return [
        alias(col(src) if src is not None else exp.true(), out) for src, out in zip(node.source_columns, node.columns)
    ]


def weighted_plain(node: Scan, ctx: Context, version: str, multiplicity: str) -> exp.Select:
    """The snapshot with each row once and its multiplicity in column `multiplicity` (a bag
    upstream's stored row counts; 1 for a plain source): consumers multiply it into their
    weights instead of reading each row that many times."""
    count = col(node.weight_column) if node.weight_column is not None else exp.Literal.number(1)
    return select_from(_columns(node) + [alias(count, multiplicity)], ctx.snapshot(node.relation, version))


def keyed_source_plain(
    node: Scan, ctx: Context, version: str, source: str, changed_relation: str, changed_source, more: tuple = ()
):
    """The snapshot narrowed to what can hold a value that `changed_relation`'s change has in its
    column `changed_source` (or one of the `more` (relation, column) changes has), in the source
    column `source` (restricted_reads.keyed_read); None where the engine cannot narrow it."""
    if ctx.keyed_snapshot is None or node.weight_column is not None:
        return None
    extra = {"more": more} if more else {}
    relation = ctx.keyed_snapshot(node.relation, version, source, changed_relation, changed_source, **extra)
    return None if relation is None else source_plain(node, relation)


def source_plain(node: Scan, relation: exp.Expr) -> exp.Select:
    """The scan's columns over `relation`, which stands for (part of) its source's snapshot."""
    return select_from(_columns(node), relation)


def plain(node: Scan, ctx: Context, version: str) -> exp.Select:
    """The snapshot as rows (a bag upstream's rows repeated by their counts: for consumers
    that have no weights; the join chain and the aggregates' delta path use weighted_plain)."""
    query = select_from(_columns(node), ctx.snapshot(node.relation, version))
    if node.weight_column is None:
        return query
    return repeat_rows(query, col(node.weight_column), ctx.alias("rep"))


def delta(node: Scan, ctx: Context):
    if node.relation not in ctx.changed:
        return None
    w = (
        weight()
        if node.weight_column is None
        else alias(exp.Mul(this=weight(), expression=col(node.weight_column)), WEIGHT)
    )
    raw = select_from(_columns(node) + [w], ctx.changes(node.relation))
    if node.relation in ctx.consolidated:
        # Already consolidated over every column the query reads from this source; a scan that
        # reads fewer may keep a cancelling pair, which the delta rules above tolerate (linear).
        return raw
    return consolidate(ctx, raw, node.columns)


class ScanOperator(Operator):
    nodes = (Scan,)

    @classmethod
    def plain(cls, node: Node, ctx: Context, version: str, walk: Walk) -> exp.Expr:
        assert isinstance(node, Scan)
        return plain(node, ctx, version)

    @classmethod
    def delta(cls, node: Node, ctx: Context, walk: Walk) -> exp.Expr | None:
        assert isinstance(node, Scan)
        return delta(node, ctx)

    @classmethod
    def copied_from(cls, node: Node, name: str, ref: str) -> str | None:
        assert isinstance(node, Scan)
        return node.source_columns[node.columns.index(name)] if node.relation == ref else None
