"""What the rewrite passes need to know about one SELECT block of a qualified query: its own
FROM aliases, which columns of an expression belong to an enclosing block (correlation), and how
to add a FROM item. Every column is qualified (`alias.column`) by sql.parse.qualify_query."""

from __future__ import annotations

from typing import Iterator

from sqlglot import exp

from python_helpers.sql.aggregates import is_aggregate
from python_helpers.sql.predicates import conjuncts

_SCOPES = (exp.Select, exp.SetOperation, exp.Subquery)


class FreshNames:
    """Aliases for the FROM items the rewrites add, unique within one query."""

    def __init__(self):
        self._n = 0

    def __call__(self, base: str) -> str:
        self._n += 1
        return f"{base}{self._n}"


def is_sublink(node: exp.Expr) -> bool:
    """EXISTS (subquery) or x IN (subquery): the predicates the rewrite passes move out."""
    return isinstance(node, exp.Exists) or (isinstance(node, exp.In) and node.args.get("query") is not None)


def unparen(node: exp.Expr) -> exp.Expr:
    """The expression inside any number of parentheses."""
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def selects_bottom_up(query: exp.Expr) -> list[exp.Select]:
    """Every SELECT block, inner blocks before the blocks that contain them."""
    return list(reversed(list(query.find_all(exp.Select))))


def from_items(select: exp.Select) -> list[exp.Expr]:
    from_ = select.args.get("from_") or select.args.get("from")
    items = [from_.this] if from_ is not None else []
    return items + [j.this for j in select.args.get("joins") or []]


def aliases(select: exp.Select) -> set[str]:
    return {item.alias_or_name.lower() for item in from_items(select)}


def here(expression: exp.Expr) -> Iterator[exp.Expr]:
    """The nodes of an expression outside any nested query (a subquery is its own scope)."""
    stack = [expression]
    while stack:
        node = stack.pop()
        yield node
        for child in node.iter_expressions():
            if not isinstance(child, _SCOPES):
                stack.append(child)


def columns_here(expression: exp.Expr) -> list[exp.Column]:
    return [n for n in here(expression) if isinstance(n, exp.Column)]


def is_outer(column: exp.Column, local: set[str]) -> bool:
    return bool(column.table) and column.table.lower() not in local


def references_outside(query: exp.Expr) -> bool:
    """Does a (sub)query read a column of a block around it (is it correlated)?"""
    defined = {t.alias_or_name.lower() for t in query.find_all(exp.Table)}
    defined |= {s.alias_or_name.lower() for s in query.find_all(exp.Subquery) if s.alias_or_name}
    return any(c.table and c.table.lower() not in defined for c in query.find_all(exp.Column))


def where_conjuncts(select: exp.Select) -> list[exp.Expr]:
    where = select.args.get("where")
    return conjuncts(where.this) if where is not None else []


def set_where(select: exp.Select, parts: list[exp.Expr]) -> None:
    select.set("where", exp.Where(this=exp.and_(*parts)) if parts else None)


def add_join(
    select: exp.Select, query: exp.Expr, alias: str, side: str = "", kind: str = "CROSS", on: exp.Expr | None = None
) -> None:
    """Append `<side> <kind> JOIN (query) alias [ON on]` to the block's FROM (left-deep: it
    joins everything before it)."""
    select.append("joins", _join(query, alias, side, kind, on))


def _join(query: exp.Expr, alias: str, side: str, kind: str, on: exp.Expr | None) -> exp.Join:
    sub = exp.Subquery(this=query, alias=exp.TableAlias(this=exp.to_identifier(alias)))
    args = {"this": sub, "kind": kind}
    if side:
        args["side"] = side
    if on is not None:
        args["on"] = on
    return exp.Join(**args)


# The alias prefix of the joins pass 5 adds for scalar subqueries.
SCALAR_JOIN = "__dvm_sq"


def add_filtering_join(select: exp.Select, query: exp.Expr, alias: str, kind: str, on: exp.Expr) -> None:
    """A LEFT SEMI / ANTI join, placed before the block's trailing scalar-subquery joins that
    `on` does not read. Those joins were only hoisted out of the same WHERE; joining their
    (often large) aggregates to rows the semi join then drops is work Spark does not undo, as
    it does not move a semi join below an inner join. Equivalent: a semi or anti join whose
    condition reads only the left side commutes with inner, cross and left joins after it."""
    joins = select.args.get("joins") or []
    read = {c.table for c in on.find_all(exp.Column)}
    at = len(joins)
    while at > 0:
        previous = joins[at - 1].this
        name = previous.alias_or_name if isinstance(previous, exp.Subquery) else ""
        if not name.startswith(SCALAR_JOIN) or name in read:
            break
        at -= 1
    select.set("joins", [*joins[:at], _join(query, alias, "LEFT", kind, on), *joins[at:]])


def unaliased(projection: exp.Expr) -> exp.Expr:
    return projection.this if isinstance(projection, exp.Alias) else projection


def output_names(query: exp.Expr) -> list[str]:
    while isinstance(query, exp.SetOperation):
        query = query.this
    if isinstance(query, exp.Subquery):
        return output_names(query.this)
    return [p.alias_or_name for p in query.expressions]


def replace_block(query: exp.Expr, block: exp.Expr, new: exp.Expr) -> exp.Expr:
    """Put `new` where `block` was; returns the (possibly new) whole query."""
    if block is query:
        return new
    block.replace(new)
    return query


def union_of(branches: list, like: exp.Select) -> exp.Expr:
    """The branches as one UNION ALL (UNION when `like` is SELECT DISTINCT), keeping its WITH."""
    out = branches[0]
    for b in branches[1:]:
        out = exp.Union(this=out, expression=b, distinct=bool(like.args.get("distinct")))
    for key in ("with_", "with"):
        if like.args.get(key) is not None:
            out.set(key, like.args[key].copy())
    return out


def transform_here(expression: exp.Expr, fn) -> exp.Expr:
    """Apply fn top-down outside nested queries; a node fn replaced is not descended into."""
    new = fn(expression)
    if new is not expression or isinstance(expression, _SCOPES):
        return new
    for key, child in list(expression.args.items()):
        if isinstance(child, exp.Expression):
            expression.set(key, transform_here(child, fn))
        elif isinstance(child, list):
            expression.set(key, [transform_here(c, fn) if isinstance(c, exp.Expression) else c for c in child])
    return expression


def keep_alias(original: exp.Expr, new: exp.Expr) -> exp.Expr:
    """`new` under the output name `original` had (a rewritten SELECT item keeps its column)."""
    return new if isinstance(new, exp.Alias) else exp.alias_(new, original.alias_or_name)


def inside_aggregate(node: exp.Expr) -> bool:
    """In an aggregate's argument or its FILTER clause: both read the real input row, not the
    grouped value."""
    parent = node.parent
    while parent is not None:
        if is_aggregate(parent) or isinstance(parent, exp.Filter):
            return True
        parent = parent.parent
    return False
