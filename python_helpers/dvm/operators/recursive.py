"""Recursive: WITH RECURSIVE r AS (B UNION ALL F(r)), maintained by weighted semi-naive evaluation.

Spark runs recursion only with UNION ALL, so R is a bag: R = B + F(B) + F(F(B)) + ..., one row
per derivation, and every step F reads R once through linear operators (checked when the tree
is built). Subtracting R_old = B_old + F_old(R_old) from R_new = B_new + F_new(R_new):

    ΔR = ΔB + (F_new − F_old)(R_old) + F_new(ΔR)

so ΔR is itself a recursion: seeded with ΔB plus the change of the steps over the old result
(only when a step's own sources changed, e.g. new or deleted edges), iterated with F_new. For
inserts that is semi-naive evaluation: only the new derivations are derived. Deletes and updates
need no separate delete-and-rederive phase: a row's multiplicity is its number of derivations
and weights are signed, so a -1 seed subtracts exactly the derivations that went through it and
a row that another derivation supports keeps that count. Spark's recursive step cannot
aggregate, so the working table is not consolidated between iterations; the result is.
"""

from __future__ import annotations

from contextlib import contextmanager

from sqlglot import exp

from python_helpers.dvm.operators.base import Operator, Walk, copied_from, with_fields
from python_helpers.dvm.sqlgen import (
    Context,
    alias,
    col,
    consolidate,
    select_from,
    sub,
    union_all_of,
    weight,
)
from python_helpers.dvm.tree import WEIGHT, KeyFilter, Node, Recursive


def _as_labels(child: Node, query, node: Recursive, ctx: Context, weighted: bool) -> exp.Select:
    """A branch's rows under the CTE's column names (positional, as UNION ALL matches them)."""
    cols = [alias(col(c), label) for c, label in zip(child.columns, node.names)]
    if weighted:
        cols.append(weight())
    return select_from(cols, sub(query, ctx.alias("rb")))


def _with_recursive(name: str, labels: list[str], body: exp.Expr, node: Recursive, weighted: bool) -> exp.Select:
    """WITH RECURSIVE name(labels) AS (body) SELECT labels AS node.columns FROM name."""
    names = labels + ([WEIGHT] if weighted else [])
    cte = exp.CTE(
        this=body, alias=exp.TableAlias(this=exp.to_identifier(name), columns=[exp.to_identifier(n) for n in names])
    )
    cols = [alias(col(label), c) for label, c in zip(labels, node.columns)]
    if weighted:
        cols.append(weight())
    query = select_from(cols, exp.to_table(name))
    query.set("with_", exp.With(expressions=[cte], recursive=True))
    return query


@contextmanager
def _bound(ctx: Context, **changes):
    """Rebind some of the context's fields while a part of the tree is rendered (the same
    context object, so generated aliases stay unique across the whole query)."""
    saved = {k: getattr(ctx, k) for k in changes}
    for k, v in changes.items():
        setattr(ctx, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(ctx, k, v)


def _reading(ctx: Context, ref: str, table):
    """ctx.snapshot with the working table `ref` bound to `table()` at every version."""
    snapshot = ctx.snapshot
    return lambda relation, version: table() if relation == ref else snapshot(relation, version)


def plain(node: Recursive, ctx: Context, version: str, plain_of) -> exp.Select:
    # Every rendering of the recursion (old and new version, rescans) gets its own name, so the
    # SQL stays valid even where CTEs are lifted to one WITH clause (python_helpers.sql.dialect
    # keeps them nested).
    name = ctx.alias("rec")
    base = _as_labels(node.base, plain_of(node.base, version), node, ctx, weighted=False)
    with _bound(ctx, snapshot=_reading(ctx, node.ref, lambda: exp.to_table(name))):
        steps = [_as_labels(s, plain_of(s, version), node, ctx, weighted=False) for s in node.steps]
    return _with_recursive(name, node.names, union_all_of([base, *steps]), node, weighted=False)


def delta(node: Recursive, ctx: Context, delta_of, plain_of, changed):
    """ΔR as a recursion over the weighted working table (None when nothing below changed)."""
    seed = []
    base = delta_of(node.base)
    if base is not None:
        seed.append(_as_labels(node.base, base, node, ctx, weighted=True))
    if any(changed(s) for s in node.steps):
        # (F_new − F_old)(R_old): the steps' delta with the working table held at R_old.
        old = _as_labels(node, plain_of(node, "old"), node, ctx, weighted=False)
        with _bound(ctx, snapshot=_reading(ctx, node.ref, lambda: sub(old.copy(), ctx.alias("rold")))):
            for s in node.steps:
                d = delta_of(s)
                if d is not None:
                    seed.append(_as_labels(s, d, node, ctx, weighted=True))
    if not seed:
        return None
    # F_new(Δ): each step's delta when only the working table changed and every other source
    # is read at its new version.
    work = ctx.alias("rdelta")
    snapshot = ctx.snapshot
    with _bound(
        ctx,
        changed={node.ref},
        consolidated=ctx.consolidated | {node.ref},
        snapshot=lambda relation, version: snapshot(relation, "new"),
        changes=lambda relation: exp.to_table(work),
    ):
        steps = [_as_labels(s, delta_of(s), node, ctx, weighted=True) for s in node.steps]
    recursion = _with_recursive(work, node.names, union_all_of(seed + steps), node, weighted=True)
    out = consolidate(ctx, recursion, node.columns)
    # Spark would run the recursion again for every reference to it in the MERGE (the aggregate
    # state, the rescan flags, ...): computed once when the engine can.
    return ctx.materialize(out) if ctx.materialize is not None else out


class RecursiveOperator(Operator):
    nodes = (Recursive,)

    @classmethod
    def plain(cls, node: Node, ctx: Context, version: str, walk: Walk) -> exp.Expr:
        assert isinstance(node, Recursive)
        return plain(node, ctx, version, walk.plain)

    @classmethod
    def delta(cls, node: Node, ctx: Context, walk: Walk) -> exp.Expr | None:
        assert isinstance(node, Recursive)
        return delta(node, ctx, walk.delta, walk.plain, walk.changed)

    @classmethod
    def restricted(cls, node: Node, key_exprs: list, keys: exp.Expr, key_names: list) -> Node | None:
        """When every step copies the key columns unchanged from the working table, every row
        descends from a base row with the same keys: restricting the base restricts the result."""
        assert isinstance(node, Recursive)
        positions = []
        for k in key_exprs:
            if not isinstance(k, exp.Column) or k.name not in node.columns:
                return None
            positions.append(node.columns.index(k.name))
        for i in positions:
            if any(copied_from(step, step.columns[i], node.ref) != node.names[i] for step in node.steps):
                return None
        base = KeyFilter(
            columns=list(node.base.columns),
            child=node.base,
            key_exprs=[exp.column(node.base.columns[i]) for i in positions],
            keys=keys,
            key_names=list(key_names),
        )
        return with_fields(node, base=base)
