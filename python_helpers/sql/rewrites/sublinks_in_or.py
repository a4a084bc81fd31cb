"""Pass 6: EXISTS / IN (subquery) nested in OR (or under NOT) become top-level conjuncts of
disjoint UNION ALL branches, which the semi/anti join pass then turns into semi and anti joins.

    SELECT ... FROM t WHERE a OR EXISTS (q)
 => SELECT ... FROM t WHERE a
    UNION ALL
    SELECT ... FROM t WHERE NOT COALESCE(a, FALSE) AND EXISTS (q)

A WHERE keeps the rows whose predicate is TRUE; the branches split those rows by the first
disjunct that is TRUE, so each row lands in exactly one branch and the bag is unchanged.
`NOT COALESCE(t, FALSE)` is "t is not TRUE"; for the two-valued EXISTS it is NOT EXISTS.
Before splitting, NOT is pushed inward (De Morgan, which holds in SQL's three-valued logic) and
IN / NOT IN under OR are written as EXISTS / NOT EXISTS with the same TRUE rows:
`x IN (SELECT y ...)` is TRUE iff some y equals x, and `x NOT IN (SELECT y ...)` is TRUE iff no
y equals x, is NULL, or meets a NULL x. A disjunct that is itself an AND holding a subquery
makes its negation an OR again: passes repeat until no subquery is left inside OR, with at most
MAX_BRANCHES branches per block. An aggregate, DISTINCT or window block is split below its
grouping (FROM and WHERE move into a derived table).
"""

from __future__ import annotations

from sqlglot import exp

from python_helpers.errors import UnsupportedSql
from python_helpers.sql.aggregates import is_aggregate
from python_helpers.sql.predicates import conjuncts
from python_helpers.sql.rewrites import blocks

MAX_BRANCHES = 16


def _nested_sublinks(conj: exp.Expr) -> bool:
    """Does the conjunct hold a subquery predicate that is not itself the conjunct (or NOT of it)?"""
    body = blocks.unparen(conj.this if isinstance(conj, exp.Not) else conj)
    return any(blocks.is_sublink(n) for n in blocks.here(conj)) and not blocks.is_sublink(body)


def rewrite(model: str, query: exp.Expr, fresh: blocks.FreshNames) -> exp.Expr:
    for _ in range(MAX_BRANCHES):
        target = next(
            (s for s in blocks.selects_bottom_up(query) if any(_nested_sublinks(c) for c in blocks.where_conjuncts(s))),
            None,
        )
        if target is None:
            return query
        query = blocks.replace_block(query, target, _split(model, target, fresh))
    raise UnsupportedSql(model, f"subqueries in OR need more than {MAX_BRANCHES} UNION branches to rewrite")


def _split(model: str, select: exp.Select, fresh: blocks.FreshNames) -> exp.Expr:
    if _grouped(select):
        return _wrap(model, select, fresh)
    parts = [p for c in blocks.where_conjuncts(select) for p in conjuncts(_push_not(c))]
    k = next((i for i, c in enumerate(parts) if _nested_sublinks(c)), None)
    if k is None:  # pushing NOT inward was enough
        new = select.copy()
        blocks.set_where(new, parts)
        return new
    disjuncts = _disjuncts(parts[k])
    if len(disjuncts) < 2:
        # NOT pushed inward made it a plain conjunction (or a single sublink): no split needed.
        new = select.copy()
        blocks.set_where(new, parts[:k] + conjuncts(parts[k]) + parts[k + 1 :])
        return new
    branches = []
    for i, d in enumerate(disjuncts):
        branch = select.copy()
        for key in ("with_", "with", "distinct"):
            branch.set(key, None)
        rest = [_not_true(model, disjuncts[j]) for j in range(i)]
        blocks.set_where(branch, parts[:k] + conjuncts(d.copy()) + rest + parts[k + 1 :])
        branches.append(branch)
    if len(branches) > MAX_BRANCHES:
        raise UnsupportedSql(model, f"subqueries in OR need more than {MAX_BRANCHES} UNION branches to rewrite")
    return blocks.union_of(branches, select)


def _disjuncts(e: exp.Expr) -> list:
    e = blocks.unparen(e)
    if isinstance(e, exp.Or):
        return _disjuncts(e.this) + _disjuncts(e.expression)
    return [e]


def _push_not(e: exp.Expr) -> exp.Expr:
    """NOT moved inward to the leaves (De Morgan; NOT NOT x = x)."""
    e = blocks.unparen(e)
    if isinstance(e, exp.Not):
        inner = blocks.unparen(e.this)
        if isinstance(inner, exp.Not):
            return _push_not(inner.this)
        if isinstance(inner, exp.And):
            return exp.Or(
                this=_push_not(exp.Not(this=inner.this.copy())),
                expression=_push_not(exp.Not(this=inner.expression.copy())),
            )
        if isinstance(inner, exp.Or):
            return exp.And(
                this=_push_not(exp.Not(this=inner.this.copy())),
                expression=_push_not(exp.Not(this=inner.expression.copy())),
            )
        return exp.Not(this=inner.copy())
    if isinstance(e, (exp.And, exp.Or)):
        return type(e)(this=_push_not(e.this), expression=_push_not(e.expression))
    return e.copy()


def _not_true(model: str, d: exp.Expr) -> exp.Expr:
    """A predicate TRUE exactly where `d` is not TRUE."""
    d = blocks.unparen(d)
    negated = isinstance(d, exp.Not)
    body = blocks.unparen(d.this if negated else d)
    if isinstance(body, exp.Exists):
        return body.copy() if negated else exp.Not(this=body.copy())
    if isinstance(body, exp.In) and body.args.get("query") is not None:
        exists = _in_as_exists(model, body, negated)  # EXISTS, or NOT EXISTS when negated
        return exists.this if isinstance(exists, exp.Not) else exp.Not(this=exists)
    if isinstance(d, exp.And):  # not (a AND b) is TRUE where a or b is not TRUE
        return exp.Or(this=_not_true(model, d.this), expression=_not_true(model, d.expression))
    if isinstance(d, exp.Or):
        return exp.And(this=_not_true(model, d.this), expression=_not_true(model, d.expression))
    return exp.Not(this=exp.Coalesce(this=exp.Paren(this=d.copy()), expressions=[exp.false()]))


def _in_as_exists(model: str, node: exp.In, negated: bool) -> exp.Expr:
    """EXISTS with the TRUE rows of `x IN (q)` (negated: of `x NOT IN (q)`, as NOT EXISTS ...)."""
    sub = node.args["query"]
    body = sub.this if isinstance(sub, exp.Subquery) else sub
    names = blocks.output_names(body)
    left = node.this
    lhs = list(left.expressions) if isinstance(left, exp.Tuple) else [left]
    if len(lhs) != len(names) or (negated and len(lhs) != 1):
        raise UnsupportedSql(model, "IN / NOT IN inside OR over several columns")
    alias = "__dvm_sub"
    matches = [exp.EQ(this=exp.column(n, table=alias), expression=v.copy()) for v, n in zip(lhs, names)]
    condition = exp.and_(*matches)
    if negated:
        condition = exp.or_(
            matches[0],
            exp.Is(this=exp.column(names[0], table=alias), expression=exp.Null()),
            exp.Is(this=lhs[0].copy(), expression=exp.Null()),
        )
    inner = exp.Select(expressions=[exp.alias_(exp.Literal.number(1), "__dvm_one")]).from_(
        exp.Subquery(this=body.copy(), alias=exp.TableAlias(this=exp.to_identifier(alias))), copy=False
    )
    inner = inner.where(condition, copy=False)
    exists = exp.Exists(this=inner)
    return exp.Not(this=exists) if negated else exists


def _grouped(select: exp.Select) -> bool:
    return bool(select.args.get("group") or select.args.get("having") or select.args.get("distinct")) or any(
        is_aggregate(n) or isinstance(n, exp.Window) for p in select.expressions for n in blocks.here(p)
    )


def _wrap(model: str, select: exp.Select, fresh: blocks.FreshNames) -> exp.Select:
    """FROM and WHERE of a grouped block into a derived table that the next round splits."""
    alias = fresh("__dvm_or")
    local = blocks.aliases(select)
    outer_parts = list(select.expressions) + [select.args[k] for k in ("group", "having") if select.args.get(k)]
    columns: dict = {}
    for part in outer_parts:
        for c in blocks.columns_here(part):
            if c.table and c.table.lower() in local:
                columns.setdefault((c.table.lower(), c.name.lower()), f"{c.table}__{c.name}".lower())
    inner = exp.Select(
        expressions=[exp.alias_(exp.column(col, table=tab), name) for (tab, col), name in columns.items()]
        or [exp.alias_(exp.true(), "__dvm_one")]
    )
    for key in ("from_", "from", "joins", "laterals", "where"):
        if select.args.get(key) is not None:
            value = select.args[key]
            inner.set(key, [v.copy() for v in value] if isinstance(value, list) else value.copy())

    def swap(node):
        if isinstance(node, exp.Column) and node.table and (node.table.lower(), node.name.lower()) in columns:
            return exp.column(columns[(node.table.lower(), node.name.lower())], table=alias)
        return node

    outer = select.copy()
    for key in ("joins", "laterals", "where"):
        outer.set(key, None)
    outer.set("from_", exp.From(this=exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(alias)))))
    for key in ("expressions", "group", "having"):
        value = outer.args.get(key)
        if isinstance(value, list):
            outer.set(key, [v.transform(swap) for v in value])
        elif value is not None:
            outer.set(key, value.transform(swap))
    return outer


__all__ = ["MAX_BRANCHES", "rewrite"]
