"""Inner join at a pinned version. Its delta rule (bilinear, Δ(L⋈R) = ΔL ⋈ R_old + L_new ⋈ ΔR,
unrolled over a whole chain of joins and written delta-first) is in join_chain.py."""

from __future__ import annotations

from sqlglot import exp

from python_helpers.dvm.operators import join_chain
from python_helpers.dvm.operators.base import Operator, Walk, copied_from
from python_helpers.dvm.sqlgen import Context, alias, col, select_from, sub, weight
from python_helpers.dvm.tree import WEIGHT, Join, Node


def _joined(node: Join, ctx: Context, left, right, weight_side: str | None) -> exp.Select:
    la, ra = ctx.alias("l"), ctx.alias("r")
    cols: list[exp.Expr] = [col(c) for c in node.columns]
    if weight_side is not None:
        cols.append(alias(weight(la if weight_side == "left" else ra), WEIGHT))
    query = select_from(cols, sub(left, la))
    if node.condition is None:
        return query.join(sub(right, ra), join_type="CROSS", copy=False)
    return query.join(sub(right, ra), on=node.condition.copy(), copy=False)


def plain(node: Join, ctx: Context, version: str, left_sql, right_sql) -> exp.Select:
    return _joined(node, ctx, left_sql, right_sql, None)


class JoinOperator(Operator):
    nodes = (Join,)

    @classmethod
    def plain(cls, node: Node, ctx: Context, version: str, walk: Walk) -> exp.Expr:
        assert isinstance(node, Join)
        return plain(node, ctx, version, walk.plain(node.left, version), walk.plain(node.right, version))

    @classmethod
    def delta(cls, node: Node, ctx: Context, walk: Walk) -> exp.Expr | None:
        return join_chain.chain_delta(node, ctx, walk.delta, walk.plain)

    @classmethod
    def copied_from(cls, node: Node, name: str, ref: str) -> str | None:
        assert isinstance(node, Join)
        return copied_from(node.left if name in node.left.columns else node.right, name, ref)
