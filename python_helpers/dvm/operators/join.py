"""Inner join. Bilinear: Δ(L⋈R) = ΔL ⋈ R_old + L_new ⋈ ΔR.

L_new = L_old + ΔL, so the two terms add up to L_new⋈R_new − L_old⋈R_old exactly, also when
both sides changed in the same refresh. A term whose delta is empty (its sources did not
change) is pruned. The weight of a joined row is the weight of its delta side (snapshot rows
count once).
"""
from __future__ import annotations

from sqlglot import exp

from python_helpers.dvm.sqlgen import Context, alias, col, select_from, sub, union_all, weight
from python_helpers.dvm.tree import Join


def _joined(node: Join, ctx: Context, left, right, weight_side: str | None) -> exp.Select:
    la, ra = ctx.alias("l"), ctx.alias("r")
    cols = [col(c) for c in node.columns]
    if weight_side is not None:
        cols.append(alias(weight(la if weight_side == "left" else ra), "__dvm_w"))
    query = select_from(cols, sub(left, la))
    if node.condition is None:
        return query.join(sub(right, ra), join_type="CROSS", copy=False)
    return query.join(sub(right, ra), on=node.condition.copy(), copy=False)


def plain(node: Join, ctx: Context, version: str, left_sql, right_sql) -> exp.Select:
    return _joined(node, ctx, left_sql, right_sql, None)


def delta(node: Join, ctx: Context, left_delta, right_delta, left_new, right_old):
    """left_new / right_old are callables so unneeded snapshots are never rendered."""
    terms = []
    if left_delta is not None:
        terms.append(_joined(node, ctx, left_delta, right_old(), "left"))
    if right_delta is not None:
        terms.append(_joined(node, ctx, left_new(), right_delta, "right"))
    return union_all(terms)
