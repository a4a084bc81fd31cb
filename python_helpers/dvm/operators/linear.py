"""Filter, Project, Generate and UnionAll: linear operators, applied row by row to the weighted delta.

Filter and Project need deterministic expressions (checked by sql.support), so applying them to
a -1 row removes exactly what applying them to the original row once added.
"""

from __future__ import annotations

from sqlglot import exp

from python_helpers.dvm.operators import join_chain
from python_helpers.dvm.operators.base import (
    Operator,
    UnaryOperator,
    Walk,
    copied_from,
    copied_through,
    restricted,
    with_fields,
)
from python_helpers.dvm.sqlgen import Context, alias, col, select_from, sub, union_all, union_all_of, weight
from python_helpers.dvm.tree import Filter, Generate, Join, KeyFilter, Node, Project, UnionAll


def filter_plain(node: Filter, ctx: Context, version: str, child_sql) -> exp.Select:
    return select_from([exp.Star()], sub(child_sql, ctx.alias("f"))).where(node.predicate.copy(), copy=False)


def filter_delta(node: Filter, ctx: Context, child_delta):
    if child_delta is None:
        return None
    return select_from([exp.Star()], sub(child_delta, ctx.alias("f"))).where(node.predicate.copy(), copy=False)


def _project(node: Project, source, ctx: Context, weighted: bool) -> exp.Select:
    cols = [alias(e.copy(), name) for e, name in zip(node.exprs, node.columns)]
    if weighted:
        cols.append(weight())
    return select_from(cols, sub(source, ctx.alias("p")))


def project_plain(node: Project, ctx: Context, version: str, child_sql) -> exp.Select:
    return _project(node, child_sql, ctx, weighted=False)


def project_delta(node: Project, ctx: Context, child_delta):
    if child_delta is None:
        return None
    return _project(node, child_delta, ctx, weighted=True)


def _renamed(node: UnionAll, child, query, ctx: Context, weighted: bool) -> exp.Select:
    cols = [alias(col(c), name) for c, name in zip(child.columns, node.columns)]
    if weighted:
        cols.append(weight())
    return select_from(cols, sub(query, ctx.alias("u")))


def union_all_plain(node: UnionAll, ctx: Context, version: str, child_sqls) -> exp.Expr:
    return union_all_of([_renamed(node, c, q, ctx, False) for c, q in zip(node.inputs, child_sqls)])


def union_all_delta(node: UnionAll, ctx: Context, child_deltas):
    return union_all([_renamed(node, c, q, ctx, True) for c, q in zip(node.inputs, child_deltas) if q is not None])


def _generate(node: Generate, source, ctx: Context, weighted: bool) -> exp.Select:
    g = ctx.alias("g")
    cols = [col(c) for c in node.child.columns] + [col(n, g) for n in node.names]
    if weighted:
        cols.append(weight())  # a generated row weighs what its input row weighs
    lateral = exp.Lateral(
        this=node.generator.copy(),
        view=True,
        outer=node.outer,
        alias=exp.TableAlias(this=exp.to_identifier(g), columns=[exp.to_identifier(n) for n in node.names]),
    )
    return select_from(cols, sub(source, ctx.alias("p"))).lateral(lateral, copy=False)


def generate_plain(node: Generate, ctx: Context, version: str, child_sql) -> exp.Select:
    return _generate(node, child_sql, ctx, weighted=False)


def generate_delta(node: Generate, ctx: Context, child_delta):
    if child_delta is None:
        return None
    return _generate(node, child_delta, ctx, weighted=True)


def key_filter_plain(node: KeyFilter, ctx: Context, child_sql) -> exp.Select:
    a, k = ctx.alias("kf"), ctx.alias("kk")

    def qualify(e):
        return e.copy().transform(lambda n: col(n.name, a) if isinstance(n, exp.Column) and not n.table else n)

    on = exp.and_(
        *[exp.NullSafeEQ(this=qualify(e), expression=col(name, k)) for e, name in zip(node.key_exprs, node.key_names)]
    )
    return select_from([exp.Star()], sub(child_sql, a)).join(
        sub(node.keys.copy(), k), on=on, join_type="LEFT SEMI", copy=False
    )


class FilterOperator(UnaryOperator):
    nodes = (Filter,)

    @classmethod
    def over(cls, node: Node, ctx: Context, version: str, child_sql: exp.Expr) -> exp.Expr:
        assert isinstance(node, Filter)
        return filter_plain(node, ctx, version, child_sql)

    @classmethod
    def delta(cls, node: Node, ctx: Context, walk: Walk) -> exp.Expr | None:
        assert isinstance(node, Filter)
        if isinstance(node.child, Join):  # a join's own conditions: the chain is differentiated as one
            return join_chain.chain_delta(node, ctx, walk.delta, walk.plain)
        return filter_delta(node, ctx, walk.delta(node.child))

    @classmethod
    def restricted(cls, node: Node, key_exprs: list, keys: exp.Expr, key_names: list) -> Node | None:
        assert isinstance(node, Filter)
        child = restricted(node.child, key_exprs, keys, key_names)
        return None if child is None else with_fields(node, child=child)

    @classmethod
    def copied_from(cls, node: Node, name: str, ref: str) -> str | None:
        return copied_through(node, name, ref)


class ProjectOperator(UnaryOperator):
    nodes = (Project,)

    @classmethod
    def over(cls, node: Node, ctx: Context, version: str, child_sql: exp.Expr) -> exp.Expr:
        assert isinstance(node, Project)
        return project_plain(node, ctx, version, child_sql)

    @classmethod
    def delta_over(cls, node: Node, ctx: Context, child_delta: exp.Expr | None) -> exp.Expr | None:
        assert isinstance(node, Project)
        return project_delta(node, ctx, child_delta)

    @classmethod
    def restricted(cls, node: Node, key_exprs: list, keys: exp.Expr, key_names: list) -> Node | None:
        assert isinstance(node, Project)
        by_name = dict(zip(node.columns, node.exprs))
        inner = []
        for k in key_exprs:
            if not isinstance(k, exp.Column) or k.name not in by_name:
                return None
            inner.append(by_name[k.name].copy())
        child = restricted(node.child, inner, keys, key_names)
        return None if child is None else with_fields(node, child=child)

    @classmethod
    def copied_from(cls, node: Node, name: str, ref: str) -> str | None:
        assert isinstance(node, Project)
        e = node.exprs[node.columns.index(name)]
        return copied_from(node.child, e.name, ref) if isinstance(e, exp.Column) else None


class UnionAllOperator(Operator):
    nodes = (UnionAll,)

    @classmethod
    def plain(cls, node: Node, ctx: Context, version: str, walk: Walk) -> exp.Expr:
        assert isinstance(node, UnionAll)
        return union_all_plain(node, ctx, version, [walk.plain(c, version) for c in node.inputs])

    @classmethod
    def delta(cls, node: Node, ctx: Context, walk: Walk) -> exp.Expr | None:
        assert isinstance(node, UnionAll)
        return union_all_delta(node, ctx, [walk.delta(c) for c in node.inputs])

    @classmethod
    def copied_from(cls, node: Node, name: str, ref: str) -> str | None:
        assert isinstance(node, UnionAll)
        i = node.columns.index(name)
        found = {copied_from(c, c.columns[i], ref) for c in node.inputs}
        return found.pop() if len(found) == 1 else None


class GenerateOperator(UnaryOperator):
    nodes = (Generate,)

    @classmethod
    def over(cls, node: Node, ctx: Context, version: str, child_sql: exp.Expr) -> exp.Expr:
        assert isinstance(node, Generate)
        return generate_plain(node, ctx, version, child_sql)

    @classmethod
    def delta_over(cls, node: Node, ctx: Context, child_delta: exp.Expr | None) -> exp.Expr | None:
        assert isinstance(node, Generate)
        return generate_delta(node, ctx, child_delta)

    @classmethod
    def copied_from(cls, node: Node, name: str, ref: str) -> str | None:
        return copied_through(node, name, ref)


class KeyFilterOperator(UnaryOperator):
    """Only inside a restricted recursion's base (restrict pushes it there); never differentiated."""

    nodes = (KeyFilter,)

    @classmethod
    def over(cls, node: Node, ctx: Context, version: str, child_sql: exp.Expr) -> exp.Expr:
        assert isinstance(node, KeyFilter)
        return key_filter_plain(node, ctx, child_sql)
