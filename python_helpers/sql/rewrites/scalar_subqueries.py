"""Pass 2: scalar subqueries in WHERE become joins with a grouped derived table.

Uncorrelated, a single aggregate without GROUP BY returns exactly one row, so

    ... WHERE x > (SELECT avg(y) FROM r)
 => ... CROSS JOIN (SELECT avg(y) AS __dvm_v FROM r) __dvm_sqN WHERE x > __dvm_sqN.__dvm_v

is equivalent wherever the subquery appears in the predicate.

Correlated by equalities `outer_expr = inner_expr` (top-level conjuncts of the subquery's WHERE),
the subquery's value for an outer row is its aggregate over the group inner_expr = outer_expr:

    ... WHERE q < (SELECT 0.2 * avg(l.q) FROM l WHERE l.k = p.k AND <local>)
 => ... CROSS JOIN (SELECT l.k AS __dvm_k0, 0.2 * avg(l.q) AS __dvm_v FROM l WHERE <local>
                   GROUP BY l.k) __dvm_sqN
        WHERE q < __dvm_sqN.__dvm_v AND p.k = __dvm_sqN.__dvm_k0

An outer row with no group gets no join partner, where the subquery would have given NULL. That
is the same only where NULL drops the row: so the subquery must sit in a comparison, reached
through arithmetic only, and its value must be NULL on no rows (SUM / AVG / MIN / MAX and the
variance family, combined by arithmetic; not COUNT, which gives 0). Other forms are rejected
with the reason.
"""
from __future__ import annotations

from sqlglot import exp

from python_helpers.errors import UnsupportedSql
from python_helpers.sql.aggregates import is_aggregate
from python_helpers.sql.rewrites import blocks

_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg, exp.Paren, exp.Cast)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_NULL_ON_EMPTY = (exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Stddev, exp.StddevSamp, exp.StddevPop,
                  exp.Variance, exp.VariancePop)


def scalar_subqueries(expression: exp.Expression) -> list[exp.Subquery]:
    """Scalar subqueries in an expression (not EXISTS / IN bodies, not inside other subqueries)."""
    found = []
    stack = [expression]
    while stack:
        node = stack.pop()
        if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Query):
            found.append(node)
            continue
        if isinstance(node, exp.Exists) or isinstance(node, (exp.Select, exp.SetOperation)):
            continue
        for key, child in node.args.items():
            if isinstance(node, exp.In) and key == "query":
                continue
            for c in (child if isinstance(child, list) else [child]):
                if isinstance(c, exp.Expression):
                    stack.append(c)
    return found


def rewrite(model: str, query: exp.Expression, fresh: blocks.FreshNames) -> exp.Expression:
    for select in blocks.selects_bottom_up(query):
        parts = []
        for conj in blocks.where_conjuncts(select):
            for sq in scalar_subqueries(conj):
                extra, value = _hoist(model, select, sq, conj, fresh)
                parts.extend(extra)
                if sq is conj:  # WHERE (SELECT <boolean aggregate> ...)
                    conj = value
            parts.append(conj)
        if select.args.get("where") is not None:
            blocks.set_where(select, parts)
    return query


def _hoist(model: str, select: exp.Select, sq: exp.Subquery, conj: exp.Expression,
           fresh: blocks.FreshNames) -> tuple[list, exp.Expression]:
    inner = sq.this
    if not isinstance(inner, exp.Select):
        raise UnsupportedSql(model, "scalar subquery over a set operation")
    if (len(inner.expressions) != 1 or any(inner.args.get(k) for k in ("group", "having", "limit", "offset",
                                                                      "distinct"))
            or not any(is_aggregate(n) for n in blocks.here(inner.expressions[0]))):
        raise UnsupportedSql(model, "scalar subquery that is not one aggregate without GROUP BY "
                                    "(it could return no row or several)")
    local_aliases = blocks.aliases(inner)
    local, correlated = [], []
    for c in blocks.where_conjuncts(inner):
        (correlated if any(blocks.is_outer(col, local_aliases) for col in blocks.columns_here(c))
         else local).append(c)
    _check_no_other_correlation(model, inner, local_aliases)
    pairs = [_equality(model, c, local_aliases) for c in correlated]
    value = blocks.unaliased(inner.expressions[0]).copy()
    if pairs:
        _check_null_rejecting(model, sq, conj)
        _check_null_on_empty(model, value)
    alias = fresh("__dvm_sq")
    derived = inner.copy()
    blocks.set_where(derived, [c.copy() for c in local])
    derived.set("expressions", [exp.alias_(i.copy(), f"__dvm_k{n}") for n, (_, i) in enumerate(pairs)]
                + [exp.alias_(value, "__dvm_v")])
    if pairs:
        derived = derived.group_by(*[i.copy() for _, i in pairs], copy=False)
    blocks.add_join(select, derived, alias)
    value_ref = exp.column("__dvm_v", table=alias)
    sq.replace(value_ref)
    return [exp.EQ(this=o.copy(), expression=exp.column(f"__dvm_k{n}", table=alias))
            for n, (o, _) in enumerate(pairs)], value_ref


def _check_no_other_correlation(model: str, inner: exp.Select, local_aliases: set) -> None:
    places = list(inner.expressions) + [j.args["on"] for j in inner.args.get("joins") or [] if j.args.get("on")]
    for place in places:
        if any(blocks.is_outer(c, local_aliases) for c in blocks.columns_here(place)):
            raise UnsupportedSql(model, "scalar subquery correlated outside its WHERE clause")


def _equality(model: str, conj: exp.Expression, local_aliases: set) -> tuple:
    """(outer expression, inner expression) of a correlating equality."""
    if isinstance(conj, exp.EQ):
        sides = []
        for side in (conj.this, conj.expression):
            cols = blocks.columns_here(side)
            outer = {blocks.is_outer(c, local_aliases) for c in cols}
            sides.append(outer.pop() if len(outer) == 1 else None)
        if sides == [True, False]:
            return conj.this, conj.expression
        if sides == [False, True]:
            return conj.expression, conj.this
    raise UnsupportedSql(model, f"scalar subquery correlated by {conj.sql('spark')[:80]} (only equalities "
                                "between an outer and an inner expression can be turned into a join)")


def _check_null_rejecting(model: str, sq: exp.Subquery, conj: exp.Expression) -> None:
    node = sq
    while node is not conj:
        parent = node.parent
        if parent is conj:
            if isinstance(conj, _COMPARISONS):
                return
            break
        if not isinstance(parent, _ARITHMETIC):
            break
        node = parent
    raise UnsupportedSql(model, "correlated scalar subquery outside a comparison in a WHERE conjunct "
                                "(a missing group would not drop the row)")


def _check_null_on_empty(model: str, value: exp.Expression) -> None:
    stack = [value]
    while stack:
        node = stack.pop()
        if is_aggregate(node):
            if not isinstance(node, _NULL_ON_EMPTY) or isinstance(node.this, exp.Distinct):
                raise UnsupportedSql(model, f"correlated scalar subquery over {node.sql('spark')[:60]} "
                                            "(only SUM/AVG/MIN/MAX/variance, which are NULL on no rows)")
            continue
        if not isinstance(node, _ARITHMETIC + (exp.Literal,)):
            raise UnsupportedSql(model, f"correlated scalar subquery value {value.sql('spark')[:60]} "
                                        "(only arithmetic over aggregates)")
        stack.extend(node.iter_expressions())
