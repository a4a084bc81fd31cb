"""Inner join at a pinned version. Its delta rule (bilinear, Δ(L⋈R) = ΔL ⋈ R_old + L_new ⋈ ΔR,
unrolled over a whole chain of joins and written delta-first) is in join_chain.py."""

from __future__ import annotations

from sqlglot import exp

from python_helpers.dvm.sqlgen import Context, alias, col, select_from, sub, weight
from python_helpers.dvm.tree import Join


def _joined(node: Join, ctx: Context, left, right, weight_side: str | None) -> exp.Select:
    la, ra = ctx.alias("l"), ctx.alias("r")
    cols: list[exp.Expr] = [col(c) for c in node.columns]
    if weight_side is not None:
        cols.append(alias(weight(la if weight_side == "left" else ra), "__dvm_w"))
    query = select_from(cols, sub(left, la))
    if node.condition is None:
        return query.join(sub(right, ra), join_type="CROSS", copy=False)
    return query.join(sub(right, ra), on=node.condition.copy(), copy=False)


def plain(node: Join, ctx: Context, version: str, left_sql, right_sql) -> exp.Select:
    return _joined(node, ctx, left_sql, right_sql, None)
