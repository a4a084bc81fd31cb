"""Walk the operator tree: `plain` renders a node at a pinned version, `delta` its weighted change.

Each node's rules belong to its operator (`dvm/operators/`, one `Operator` subclass per node
class, found by `operator_for`); this module only walks. `delta` returns None when no source
below the node changed in this refresh, which prunes whole branches (and the snapshots they
would have read) from the generated SQL.
"""

from __future__ import annotations

from sqlglot import exp

import python_helpers.dvm.operators  # noqa: F401 - registers every operator
from python_helpers.dvm.operators.base import operator_for
from python_helpers.dvm.sqlgen import Context
from python_helpers.dvm.tree import Node


class _Walk:
    """The rules applied to any node, for operators to render their inputs with."""

    def __init__(self, ctx: Context):
        self.ctx = ctx

    def plain(self, node: Node, version: str) -> exp.Expr:
        return operator_for(node).plain(node, self.ctx, version, self)

    def delta(self, node: Node) -> exp.Expr | None:
        if not self.changed(node):
            return None
        return operator_for(node).delta(node, self.ctx, self)

    def changed(self, node: Node) -> bool:
        return changed(node, self.ctx)


def plain(node: Node, ctx: Context, version: str) -> exp.Expr:
    return _Walk(ctx).plain(node, version)


def changed(node: Node, ctx: Context) -> bool:
    return bool(node.relations() & ctx.changed)


def delta(node: Node, ctx: Context) -> exp.Expr | None:
    return _Walk(ctx).delta(node)
