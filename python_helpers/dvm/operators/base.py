"""What every operator answers, and the registry that finds an operator's rules from its node.

An operator is a subclass of `Operator` naming the node classes it handles (`nodes`); defining
it registers it. It answers, for one node:

* `plain`: the node's rows at a pinned version (`old` or `new`) as SQL;
* `delta`: its weighted change between the versions as SQL (None when nothing below changed:
  `differentiate.delta` prunes such branches before asking);
* `restricted`: the node restricted to rows whose key expressions are in a set of keys, the
  restriction pushed below it to a recursion's base (None when it cannot be pushed: the default);
* `copied_from`: which working-table column an output column is an unchanged copy of, inside a
  recursion's step (None: not a copy, the default).

Children are reached through a `Walk`, never by importing the dispatch, so operator modules
depend only on this module, the tree and the SQL helpers.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from sqlglot import exp

from python_helpers.dvm.sqlgen import Context
from python_helpers.dvm.tree import Node


class Walk(Protocol):
    """The other nodes' rules, as the dispatch applies them (children, or a whole subtree)."""

    def plain(self, node: Node, version: str) -> exp.Expr: ...

    def delta(self, node: Node) -> exp.Expr | None: ...

    def changed(self, node: Node) -> bool: ...


_REGISTRY: dict[type[Node], type[Operator]] = {}


class Operator:
    nodes: ClassVar[tuple[type[Node], ...]] = ()

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        for node_type in cls.nodes:
            if node_type in _REGISTRY:
                raise TypeError(
                    f"{node_type.__name__} has two operators: {_REGISTRY[node_type].__name__}, {cls.__name__}"
                )
            _REGISTRY[node_type] = cls

    @classmethod
    def plain(cls, node: Node, ctx: Context, version: str, walk: Walk) -> exp.Expr:
        raise TypeError(f"no plain rule for {type(node).__name__}")

    @classmethod
    def delta(cls, node: Node, ctx: Context, walk: Walk) -> exp.Expr | None:
        raise TypeError(f"no delta rule for {type(node).__name__}")

    @classmethod
    def restricted(cls, node: Node, key_exprs: list, keys: exp.Expr, key_names: list) -> Node | None:
        return None

    @classmethod
    def copied_from(cls, node: Node, name: str, ref: str) -> str | None:
        return None


class UnaryOperator(Operator):
    """An operator over one input whose rules need only that input rendered: `over` is the node
    over its input's rows at a version, `delta_over` over its input's weighted change (None when
    the input did not change)."""

    @classmethod
    def plain(cls, node: Node, ctx: Context, version: str, walk: Walk) -> exp.Expr:
        return cls.over(node, ctx, version, walk.plain(only_child(node), version))

    @classmethod
    def delta(cls, node: Node, ctx: Context, walk: Walk) -> exp.Expr | None:
        return cls.delta_over(node, ctx, walk.delta(only_child(node)))

    @classmethod
    def over(cls, node: Node, ctx: Context, version: str, child_sql: exp.Expr) -> exp.Expr:
        raise NotImplementedError

    @classmethod
    def delta_over(cls, node: Node, ctx: Context, child_delta: exp.Expr | None) -> exp.Expr | None:
        raise TypeError(f"no delta rule for {type(node).__name__}")


def only_child(node: Node) -> Node:
    (child,) = node.children()
    return child


def copied_through(node: Node, name: str, ref: str) -> str | None:
    """`copied_from` of a node that passes its input's columns through unchanged (Filter, Generate)."""
    child = only_child(node)
    return copied_from(child, name, ref) if name in child.columns else None


def operator_for(node: Node) -> type[Operator]:
    try:
        return _REGISTRY[type(node)]
    except KeyError:
        raise TypeError(f"no operator for {type(node).__name__} (is its module imported in dvm/operators?)") from None


def restricted(node: Node, key_exprs: list, keys: exp.Expr, key_names: list) -> Node | None:
    """`node` restricted to rows whose `key_exprs` (over node.columns) are in `keys` (columns
    `key_names`), the restriction applied at a recursion's base; None if it cannot be pushed."""
    return operator_for(node).restricted(node, key_exprs, keys, key_names)


def copied_from(node: Node, name: str, ref: str) -> str | None:
    """The working-table (`ref`) column that output column `name` of `node` is an unchanged copy of."""
    return operator_for(node).copied_from(node, name, ref)


def with_fields(node: Node, **fields) -> Node:
    """A shallow copy of `node` with some fields replaced (the tree is never mutated in place)."""
    import copy

    out = copy.copy(node)
    for k, v in fields.items():
        setattr(out, k, v)
    return out
