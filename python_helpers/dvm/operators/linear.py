"""Filter, Project, Generate and UnionAll: linear operators, applied row by row to the weighted delta.

Filter and Project need deterministic expressions (checked by sql.support), so applying them to
a -1 row removes exactly what applying them to the original row once added.
"""

from __future__ import annotations

from sqlglot import exp

from python_helpers.dvm.sqlgen import Context, alias, col, select_from, sub, union_all, union_all_of, weight
from python_helpers.dvm.tree import Filter, Generate, KeyFilter, Project, UnionAll


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
