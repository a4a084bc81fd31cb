"""Walk the operator tree: `plain` renders a node at a pinned version, `delta` its weighted change.

Each node's rules belong to its operator (`dvm/operators/`, one `Operator` subclass per node
class, found by `operator_for`); this module only walks. `delta` returns None when no source
below the node changed in this refresh, which prunes whole branches (and the snapshots they
would have read) from the generated SQL. So does a filter over a changed source whose change
it keeps none of, where the engine can tell without a job (Context.empty_change): its rows at
the old version are its rows at the new one, so the branch is unchanged, and every rule above
asks `changed` and gets that answer. A change that misses a date range or a status skips the
joins and recomputes it would otherwise feed.
"""

from __future__ import annotations

from sqlglot import exp

import python_helpers.dvm.operators  # noqa: F401 - registers every operator
from python_helpers.dvm.operators.base import operator_for
from python_helpers.dvm.sqlgen import Context
from python_helpers.dvm.tree import Filter, Node, Scan


class _Walk:
    """The rules applied to any node, for operators to render their inputs with."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self._changed: dict = {}  # (id(node), changed set) -> (node, changed(node)), where filters are asked

    def plain(self, node: Node, version: str) -> exp.Expr:
        if version == "old" and self.ctx.empty_change is not None and not self.changed(node):
            version = "new"  # unchanged once filtered: one snapshot read, as for an unchanged source
        return operator_for(node).plain(node, self.ctx, version, self)

    def delta(self, node: Node) -> exp.Expr | None:
        if not self.changed(node):
            return None
        return operator_for(node).delta(node, self.ctx, self)

    def changed(self, node: Node) -> bool:
        if not changed(node, self.ctx):
            return False
        if self.ctx.empty_change is None:
            return True
        # A recursion's delta rebinds `changed` to its working table while it renders the steps
        # again (operators/recursive.py): an answer holds for the changed set it was given.
        asked = (id(node), frozenset(self.ctx.changed))
        known = self._changed.get(asked)
        if known is None:
            if isinstance(node, Scan):
                answer = True
            elif self._filtered_out(node):
                answer = False
            else:
                answer = any(self.changed(c) for c in node.children())
            known = self._changed[asked] = (node, answer)  # the node held: its id stays its own
        return known[1]

    def _filtered_out(self, node: Node) -> bool:
        """A filter right over a changed source that keeps none of its change rows."""
        ask = self.ctx.empty_change
        if ask is None or not isinstance(node, Filter) or not isinstance(node.child, Scan):
            return False
        scan = node.child
        query = operator_for(node).delta(node, self.ctx, self)
        key = f"{node.predicate.sql()} | {','.join(scan.columns)}"
        return query is not None and ask(scan.relation, key, query)


def plain(node: Node, ctx: Context, version: str) -> exp.Expr:
    return _Walk(ctx).plain(node, version)


def changed(node: Node, ctx: Context) -> bool:
    return bool(node.relations() & ctx.changed)


def delta(node: Node, ctx: Context) -> exp.Expr | None:
    return _Walk(ctx).delta(node)
