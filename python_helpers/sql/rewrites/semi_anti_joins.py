"""Pass 7: EXISTS, NOT EXISTS, IN and NOT IN (subquery) conjuncts of WHERE become semi and
anti joins in the block's FROM, before the scalar-subquery joins of pass 5 they do not read
(`blocks.add_filtering_join`), else appended.

Correlated EXISTS: the subquery's WHERE conjuncts that read outer columns become the join
condition, over the inner columns they need; the rest stay inside:

    ... WHERE EXISTS (SELECT * FROM l WHERE l.k = o.k AND l.a < l.b)
 => ... LEFT SEMI JOIN (SELECT l.k AS __dvm_c0 FROM l WHERE l.a < l.b) __dvm_exN
        ON __dvm_exN.__dvm_c0 = o.k

Uncorrelated EXISTS is a property of the whole subquery, so it becomes a one-row flag whose
value (and so whose change) only moves when the subquery becomes empty or non-empty:

    ... CROSS JOIN (SELECT max(1) AS __dvm_e FROM (<subquery>) x) __dvm_exN
        WHERE __dvm_exN.__dvm_e IS [NOT] NULL

IN: `x IN (SELECT y ...)` is a semi join on x = y (a NULL comparison drops the row as IN does
in WHERE). NOT IN must keep SQL's NULL rules: the row survives when the subquery is empty, is
dropped when the subquery holds a NULL, and otherwise needs a non-NULL x with no equal y:

    ... LEFT ANTI JOIN (<subquery>) __dvm_inN ON x = __dvm_inN.y
        CROSS JOIN (SELECT max(CASE WHEN y IS NULL THEN 1 ELSE 0 END) AS __dvm_m FROM ...) __dvm_nnN
        WHERE __dvm_nnN.__dvm_m IS NULL OR (__dvm_nnN.__dvm_m = 0 AND x IS NOT NULL)

(__dvm_m is NULL for an empty subquery, 1 when it holds a NULL.) Conjuncts nested in OR, CASE
or NOT (other than NOT EXISTS / NOT IN) are rejected with the reason.
"""

from __future__ import annotations

from sqlglot import exp

from python_helpers.errors import UnsupportedSql
from python_helpers.sql.aggregates import is_aggregate
from python_helpers.sql.predicates import conjuncts
from python_helpers.sql.rewrites import blocks


def rewrite(model: str, query: exp.Expr, fresh: blocks.FreshNames) -> exp.Expr:
    for select in blocks.selects_bottom_up(query):
        if select.args.get("where") is None:
            continue
        parts = []
        for conj in blocks.where_conjuncts(select):
            anti, body = False, blocks.unparen(conj)
            if isinstance(body, exp.Not):
                anti, body = True, blocks.unparen(body.this)
            if isinstance(body, exp.Exists):
                parts.extend(_exists(model, select, body.this, anti, fresh))
            elif isinstance(body, exp.In) and body.args.get("query") is not None:
                parts.extend(_in(model, select, body, anti, fresh))
            else:
                if sublinks(conj):
                    raise UnsupportedSql(
                        model,
                        "EXISTS / IN (subquery) inside OR, CASE or another expression "
                        "(only a top-level AND of the WHERE clause is turned into a join)",
                    )
                parts.append(conj)
        blocks.set_where(select, parts)
    return query


def sublinks(expression: exp.Expr) -> list:
    return [n for n in blocks.here(expression) if blocks.is_sublink(n)]


def _exists(model: str, select: exp.Select, inner: exp.Expr, anti: bool, fresh) -> list:
    while isinstance(inner, exp.Subquery):
        inner = inner.this
    if not isinstance(inner, exp.Select) or not blocks.references_outside(inner):
        return _exists_flag(select, inner, anti, fresh)
    local_aliases = blocks.aliases(inner)
    local: list[exp.Expr] = []
    correlated: list[exp.Expr] = []
    for c in blocks.where_conjuncts(inner):
        (correlated if any(blocks.is_outer(col, local_aliases) for col in blocks.columns_here(c)) else local).append(c)
    if any(inner.args.get(k) for k in ("group", "having", "limit", "offset")) or any(
        is_aggregate(n) for p in inner.expressions for n in blocks.here(p)
    ):
        raise UnsupportedSql(model, "correlated EXISTS over a grouped, aggregated or limited subquery")
    joins_on = [j.args["on"] for j in inner.args.get("joins") or [] if j.args.get("on") is not None]
    if not correlated or any(blocks.is_outer(c, local_aliases) for on in joins_on for c in blocks.columns_here(on)):
        raise UnsupportedSql(model, "EXISTS subquery correlated outside the top-level AND of its WHERE clause")
    for c in correlated:
        if sublinks(c) or any(isinstance(n, exp.Subquery) for n in blocks.here(c)):
            raise UnsupportedSql(model, "EXISTS correlated through a nested subquery")
    alias = fresh("__dvm_ex")
    inner_cols: dict = {}

    def swap(node):
        if isinstance(node, exp.Column) and not blocks.is_outer(node, local_aliases):
            key = node.sql("spark")
            if key not in inner_cols:
                inner_cols[key] = (f"__dvm_c{len(inner_cols)}", node.copy())
            return exp.column(inner_cols[key][0], table=alias)
        return node

    condition = exp.and_(*[c.copy().transform(swap) for c in correlated])
    derived = inner.copy()
    blocks.set_where(derived, [c.copy() for c in local])
    derived.set(
        "expressions", [exp.alias_(c, n) for n, c in inner_cols.values()] or [exp.alias_(exp.true(), "__dvm_c0")]
    )
    derived.set("distinct", None)
    blocks.add_filtering_join(select, derived, alias, kind="ANTI" if anti else "SEMI", on=condition)
    return []


def _exists_flag(select: exp.Select, inner: exp.Expr, anti: bool, fresh) -> list:
    alias, x = fresh("__dvm_ex"), fresh("__dvm_x")
    flag = exp.Select(expressions=[exp.alias_(exp.Max(this=exp.Literal.number(1)), "__dvm_e")]).from_(
        exp.Subquery(this=inner.copy(), alias=exp.TableAlias(this=exp.to_identifier(x))), copy=False
    )
    blocks.add_join(select, flag, alias)
    test = exp.Is(this=exp.column("__dvm_e", table=alias), expression=exp.Null())
    return [test if anti else exp.Not(this=test)]


def _in(model: str, select: exp.Select, node: exp.In, anti: bool, fresh) -> list:
    subquery = node.args["query"]
    body = subquery.this if isinstance(subquery, exp.Subquery) else subquery
    if blocks.references_outside(body):
        raise UnsupportedSql(model, "correlated IN (subquery); write it as EXISTS with the correlation in its WHERE")
    left = node.this
    lhs = list(left.expressions) if isinstance(left, exp.Tuple) else [left]
    names = blocks.output_names(body)
    if len(names) != len(lhs):
        raise UnsupportedSql(model, f"IN with {len(lhs)} value(s) against a subquery of {len(names)} column(s)")
    alias = fresh("__dvm_in")
    condition = exp.and_(*[exp.EQ(this=v.copy(), expression=exp.column(n, table=alias)) for v, n in zip(lhs, names)])
    if not anti:
        blocks.add_filtering_join(select, body.copy(), alias, kind="SEMI", on=condition)
        _narrow_scalar_joins(select, lhs, body, names, fresh)
        return []
    if len(lhs) != 1:
        raise UnsupportedSql(model, "NOT IN over several columns")
    blocks.add_filtering_join(select, body.copy(), alias, kind="ANTI", on=condition)
    flag, x = fresh("__dvm_nn"), fresh("__dvm_x")
    has_null = exp.Case(
        ifs=[
            exp.If(this=exp.Is(this=exp.column(names[0], table=x), expression=exp.Null()), true=exp.Literal.number(1))
        ],
        default=exp.Literal.number(0),
    )
    nulls = exp.Select(expressions=[exp.alias_(exp.Max(this=has_null), "__dvm_m")]).from_(
        exp.Subquery(this=body.copy(), alias=exp.TableAlias(this=exp.to_identifier(x))), copy=False
    )
    blocks.add_join(select, nulls, flag)
    m = exp.column("__dvm_m", table=flag)
    empty = exp.Is(this=m.copy(), expression=exp.Null())
    clean = exp.and_(
        exp.EQ(this=m.copy(), expression=exp.Literal.number(0)),
        exp.Not(this=exp.Is(this=lhs[0].copy(), expression=exp.Null())),
    )
    return [exp.or_(empty, exp.Paren(this=clean))]


def _narrow_scalar_joins(select: exp.Select, lhs: list, body: exp.Expr, names: list, fresh) -> None:
    """`x IN (q)` beside a scalar subquery's join `x = sq.k` (pass 5): only the groups whose key
    is in q can meet a row the semi join keeps, so the grouped derived table gets the same semi
    join on its key before it aggregates (TPC-H q20: lineitem's quantities are summed for the
    `forest%` parts only, not for every part). Spark passes a semi join into an aggregate this
    way for the SQL as written, but not once the aggregate is a joined derived table. Removing
    whole groups that no kept row matches changes no result, NULL keys included: `=` never
    matches them. Only where x, the key and q's column are columns of one type (parse.py
    types them): across types, Spark's casts can make x = k and x = y hold while k = y does
    not, and the filter would then drop a group a kept row matches."""
    outputs = _output_columns(body)
    if outputs is None:
        return
    typed = [(v, n, _type_of(v)) for v, n in zip(lhs, names)]
    wanted = {v.sql("spark"): (n, kind) for v, n, kind in typed if kind and kind == outputs.get(n)}
    equalities = [c for c in blocks.where_conjuncts(select) if isinstance(c, exp.EQ)]
    for join in select.args.get("joins") or []:
        if join.args.get("on") is not None:
            equalities += [c for c in conjuncts(join.args["on"]) if isinstance(c, exp.EQ)]
    narrowed = set()
    for join in select.args.get("joins") or []:
        sub = join.this
        if not (isinstance(sub, exp.Subquery) and sub.alias_or_name.startswith(blocks.SCALAR_JOIN)):
            continue
        derived = sub.this
        if not isinstance(derived, exp.Select):
            continue
        keys = {p.alias: blocks.unaliased(p) for p in derived.expressions if p.alias.startswith("__dvm_k")}
        for eq in equalities:
            for outer, key in ((eq.this, eq.expression), (eq.expression, eq.this)):
                if not (isinstance(key, exp.Column) and key.table == sub.alias_or_name and key.name in keys):
                    continue
                name, kind = wanted.get(outer.sql("spark"), (None, None))
                if name is None or kind != _type_of(keys[key.name]) or (sub.alias_or_name, key.name) in narrowed:
                    continue
                narrowed.add((sub.alias_or_name, key.name))
                narrow = fresh("__dvm_in")
                on = exp.EQ(this=keys[key.name].copy(), expression=exp.column(name, table=narrow))
                blocks.add_join(derived, body.copy(), narrow, side="LEFT", kind="SEMI", on=on)


def _type_of(expression: exp.Expr) -> str | None:
    """A column's Spark type where parse.py typed it; None for anything else."""
    kind = expression.type if isinstance(expression, exp.Column) else None
    if kind is None or kind.is_type(exp.DataType.Type.UNKNOWN):
        return None
    return kind.sql("spark")


def _output_columns(body: exp.Expr) -> dict | None:
    """{output name: type} of a plain SELECT's column outputs (None for set operations)."""
    if not isinstance(body, exp.Select):
        return None
    return {p.alias_or_name: _type_of(blocks.unaliased(p)) for p in body.expressions}
