"""Push a key restriction down to the base of a recursion, where a semi join above it cannot go.

A group rescan (MIN / MAX after a deletion, any rescan aggregate) reads the aggregate's input
restricted to the flagged keys. When that input is a WITH RECURSIVE, Spark evaluates the whole
recursion before the restriction, which costs a rebuild. But when every step copies a key
column unchanged from the working table (`SELECT r.top, e.child ... FROM r JOIN e ...`), every
row of R descends from a base row with the same key, so

    R ⋉ K  =  the recursion run from (base ⋉ K)

and only the flagged keys' derivations are computed. `restricted` returns a copy of the path
from the aggregate's input down to such a recursion with its base restricted, or None when the
keys are not carried (the caller then restricts above, as before).
"""

from __future__ import annotations

import copy
from typing import Optional

from sqlglot import exp

from python_helpers.dvm.tree import (
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
    UnionAll,
)


def restricted(node: Node, key_exprs: list, keys: exp.Expr, key_names: list) -> Optional[Node]:
    """`node` restricted to rows whose `key_exprs` (over node.columns) are in `keys` (columns
    `key_names`), the restriction applied at a recursion's base; None if it cannot be pushed."""
    if isinstance(node, Filter):
        child = restricted(node.child, key_exprs, keys, key_names)
        return None if child is None else _with(node, child=child)
    if isinstance(node, Project):
        by_name = dict(zip(node.columns, node.exprs))
        inner = []
        for k in key_exprs:
            if not isinstance(k, exp.Column) or k.name not in by_name:
                return None
            inner.append(by_name[k.name].copy())
        child = restricted(node.child, inner, keys, key_names)
        return None if child is None else _with(node, child=child)
    if isinstance(node, Recursive):
        positions = []
        for k in key_exprs:
            if not isinstance(k, exp.Column) or k.name not in node.columns:
                return None
            positions.append(node.columns.index(k.name))
        for i in positions:
            if any(_copied_from(step, step.columns[i], node.ref) != node.names[i] for step in node.steps):
                return None
        base = KeyFilter(
            columns=list(node.base.columns),
            child=node.base,
            key_exprs=[exp.column(node.base.columns[i]) for i in positions],
            keys=keys,
            key_names=list(key_names),
        )
        return _with(node, base=base)
    return None


def _with(node: Node, **fields) -> Node:
    out = copy.copy(node)
    for k, v in fields.items():
        setattr(out, k, v)
    return out


def _copied_from(node: Node, name: str, ref: str) -> Optional[str]:
    """The working-table column that output column `name` of a step is an unchanged copy of."""
    if isinstance(node, Scan):
        return node.source_columns[node.columns.index(name)] if node.relation == ref else None
    if isinstance(node, Project):
        e = node.exprs[node.columns.index(name)]
        return _copied_from(node.child, e.name, ref) if isinstance(e, exp.Column) else None
    if isinstance(node, (Filter, Generate)):
        child = node.child
        return _copied_from(child, name, ref) if name in child.columns else None
    if isinstance(node, (Join, SemiJoin)) or (isinstance(node, OuterJoin) and node.kind == "left"):
        side = node.left if name in node.left.columns else node.right
        if isinstance(node, OuterJoin) and side is node.right:
            return None  # NULL-padded
        return _copied_from(side, name, ref)
    if isinstance(node, UnionAll):
        i = node.columns.index(name)
        found = {_copied_from(c, c.columns[i], ref) for c in node.inputs}
        return found.pop() if len(found) == 1 else None
    return None
