"""Walk the operator tree: `plain` renders a node at a pinned version, `delta` its weighted change.

`delta` returns None when no source below the node changed in this refresh, which prunes whole
branches (and the snapshots they would have read) from the generated SQL.
"""

from __future__ import annotations

from sqlglot import exp

from python_helpers.dvm.operators import join, join_chain, key_restricted, keyed_recompute, linear, recursive, scan
from python_helpers.dvm.sqlgen import Context
from python_helpers.dvm.tree import (
    Aggregate,
    Distinct,
    Filter,
    Generate,
    Join,
    KeyFilter,
    Node,
    OuterJoin,
    Project,
    Recursive,
    Scan,
    SemiJoin,
    SetOp,
    UnionAll,
    Window,
)


def plain(node: Node, ctx: Context, version: str) -> exp.Expr:
    if isinstance(node, Scan):
        return scan.plain(node, ctx, version)
    if isinstance(node, Filter):
        return linear.filter_plain(node, ctx, version, plain(node.child, ctx, version))
    if isinstance(node, Project):
        return linear.project_plain(node, ctx, version, plain(node.child, ctx, version))
    if isinstance(node, UnionAll):
        return linear.union_all_plain(node, ctx, version, [plain(c, ctx, version) for c in node.inputs])
    if isinstance(node, Join):
        return join.plain(node, ctx, version, plain(node.left, ctx, version), plain(node.right, ctx, version))
    if isinstance(node, (OuterJoin, SemiJoin, SetOp)):
        return key_restricted.plain(node, ctx, plain(node.left, ctx, version), plain(node.right, ctx, version))
    if isinstance(node, Generate):
        return linear.generate_plain(node, ctx, version, plain(node.child, ctx, version))
    if isinstance(node, Window):
        return key_restricted.window_plain(node, ctx, plain(node.child, ctx, version))
    if isinstance(node, KeyFilter):
        return linear.key_filter_plain(node, ctx, plain(node.child, ctx, version))
    if isinstance(node, Recursive):
        return recursive.plain(node, ctx, version, lambda n, v: plain(n, ctx, v))
    if isinstance(node, Aggregate):
        return keyed_recompute.aggregate_plain(node, ctx, version, plain(node.child, ctx, version))
    if isinstance(node, Distinct):
        return keyed_recompute.distinct_plain(node, ctx, version, plain(node.child, ctx, version))
    raise TypeError(f"no plain rule for {type(node).__name__}")


def changed(node: Node, ctx: Context) -> bool:
    return bool(node.relations() & ctx.changed)


def delta(node: Node, ctx: Context):
    if not changed(node, ctx):
        return None
    if isinstance(node, Scan):
        return scan.delta(node, ctx)
    if isinstance(node, Join) or (isinstance(node, Filter) and isinstance(node.child, Join)):
        return join_chain.chain_delta(node, ctx, lambda n: delta(n, ctx), lambda n, v: plain(n, ctx, v))
    if isinstance(node, Filter):
        return linear.filter_delta(node, ctx, delta(node.child, ctx))
    if isinstance(node, Project):
        return linear.project_delta(node, ctx, delta(node.child, ctx))
    if isinstance(node, UnionAll):
        return linear.union_all_delta(node, ctx, [delta(c, ctx) for c in node.inputs])
    if isinstance(node, (OuterJoin, SemiJoin, SetOp)):
        return key_restricted.delta(node, ctx, lambda n: delta(n, ctx), lambda n, v: plain(n, ctx, v))
    if isinstance(node, Generate):
        return linear.generate_delta(node, ctx, delta(node.child, ctx))
    if isinstance(node, Window):
        return key_restricted.window_delta(node, ctx, lambda n: delta(n, ctx), lambda n, v: plain(n, ctx, v))
    if isinstance(node, Recursive):
        return recursive.delta(
            node, ctx, lambda n: delta(n, ctx), lambda n, v: plain(n, ctx, v), lambda n: changed(n, ctx)
        )
    if isinstance(node, (Aggregate, Distinct)):
        return keyed_recompute.recompute_delta(
            node, ctx, delta(node.child, ctx), lambda: plain(node, ctx, "old"), lambda: plain(node, ctx, "new")
        )
    raise TypeError(f"no delta rule for {type(node).__name__}")
