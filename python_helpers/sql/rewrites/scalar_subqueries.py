"""Pass 5: scalar subqueries in WHERE become joins with a grouped derived table.

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

In the SELECT list the same join is made (a LEFT JOIN when correlated, so a missing group gives
the value on no rows). In an aggregate block a subquery outside the aggregate calls is also added
to GROUP BY: its value is one per group, so the groups do not change (a global aggregate without
GROUP BY is refused: grouping would drop its one row over empty input). Inside an aggregate call
it is an ordinary per-row value.
"""

from __future__ import annotations

from sqlglot import exp

from python_helpers.errors import UnsupportedSql
from python_helpers.sql.aggregates import is_aggregate, window_function
from python_helpers.sql.rewrites import blocks

_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg, exp.Paren, exp.Cast)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_NULL_ON_EMPTY = (
    exp.Sum,
    exp.Avg,
    exp.Min,
    exp.Max,
    exp.Stddev,
    exp.StddevSamp,
    exp.StddevPop,
    exp.Variance,
    exp.VariancePop,
)


def scalar_subqueries(expression: exp.Expr) -> list[exp.Subquery]:
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
            for c in child if isinstance(child, list) else [child]:
                if isinstance(c, exp.Expression):
                    stack.append(c)
    return found


def rewrite(model: str, query: exp.Expr, fresh: blocks.FreshNames) -> exp.Expr:
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
        grouped = _grouped(select)
        for projection in select.expressions:
            for sq in scalar_subqueries(projection):
                in_aggregate = _inside_aggregate(sq, projection)
                if grouped and not in_aggregate and select.args.get("group") is None:
                    raise UnsupportedSql(
                        model,
                        "scalar subquery in the SELECT list of an aggregate without "
                        "GROUP BY, outside the aggregates (write the subquery as a "
                        "CROSS JOIN in an outer query)",
                    )
                _, replacement = _hoist(model, select, sq, None, fresh)
                if grouped and not in_aggregate:
                    # One value per group (uncorrelated: one value; correlated: by the grouped
                    # columns it may only reference), so grouping by it too leaves the groups as
                    # they were and lets the SELECT list read it.
                    group = select.args["group"]
                    for column in replacement.find_all(exp.Column):
                        group.append("expressions", column.copy())
    return query


def _grouped(select: exp.Select) -> bool:
    return bool(select.args.get("group") or select.args.get("having")) or any(
        is_aggregate(n) and not window_function(n) for p in select.expressions for n in blocks.here(p)
    )


def _inside_aggregate(node: exp.Expr, top: exp.Expr) -> bool:
    while node is not top and node.parent is not None:
        node = node.parent
        if is_aggregate(node):
            return True
    return False


def _hoist(model: str, select: exp.Select, sq: exp.Subquery, conj, fresh: blocks.FreshNames) -> tuple[list, exp.Expr]:
    """Replace `sq` by a column of a joined derived table; returns (conjuncts to add to WHERE, the
    replacement). `conj` is the WHERE conjunct holding it (None: the SELECT list)."""
    inner = sq.this
    if not isinstance(inner, exp.Select):
        raise UnsupportedSql(model, "scalar subquery over a set operation")
    if (
        len(inner.expressions) != 1
        or any(inner.args.get(k) for k in ("group", "having", "limit", "offset", "distinct"))
        or not any(is_aggregate(n) for n in blocks.here(inner.expressions[0]))
    ):
        raise UnsupportedSql(
            model, "scalar subquery that is not one aggregate without GROUP BY (it could return no row or several)"
        )
    local_aliases = blocks.aliases(inner)
    local: list[exp.Expr] = []
    correlated: list[exp.Expr] = []
    for c in blocks.where_conjuncts(inner):
        (correlated if any(blocks.is_outer(col, local_aliases) for col in blocks.columns_here(c)) else local).append(c)
    _check_no_other_correlation(model, inner, local_aliases)
    pairs = [_equality(model, c, local_aliases) for c in correlated]
    value = blocks.unaliased(inner.expressions[0]).copy()
    empty = _empty_value(model, value) if pairs else None
    inner_join = not pairs or (_null_rejecting(sq, conj) and isinstance(empty, exp.Null))
    alias = fresh(blocks.SCALAR_JOIN)
    derived = inner.copy()
    blocks.set_where(derived, [c.copy() for c in local])
    derived.set(
        "expressions",
        [exp.alias_(i.copy(), f"__dvm_k{n}") for n, (_, i) in enumerate(pairs)]
        + [exp.alias_(value, "__dvm_v")]
        + ([] if inner_join else [exp.alias_(exp.Literal.number(1), "__dvm_m")]),
    )
    if pairs:
        derived = derived.group_by(*[i.copy() for _, i in pairs], copy=False)
    matches = [
        exp.EQ(this=o.copy(), expression=exp.column(f"__dvm_k{n}", table=alias)) for n, (o, _) in enumerate(pairs)
    ]
    replacement: exp.Expr = exp.column("__dvm_v", table=alias)
    if inner_join:
        # Uncorrelated: exactly one row. Correlated in a comparison that NULL fails: a missing
        # group drops the row either way, so an inner join (its equalities in WHERE) is exact.
        blocks.add_join(select, derived, alias)
        sq.replace(replacement)
        return matches, replacement
    # Elsewhere a missing group must give the aggregate's value on no rows: LEFT JOIN, and that
    # value (NULL, or 0 for COUNT) where nothing matched.
    blocks.add_join(select, derived, alias, side="LEFT", kind="", on=exp.and_(*matches))
    if not isinstance(empty, exp.Null):
        unmatched = exp.Is(this=exp.column("__dvm_m", table=alias), expression=exp.Null())
        replacement = exp.Case(ifs=[exp.If(this=unmatched, true=empty)], default=replacement)
    sq.replace(replacement)
    return [], replacement


def _check_no_other_correlation(model: str, inner: exp.Select, local_aliases: set) -> None:
    places = list(inner.expressions) + [j.args["on"] for j in inner.args.get("joins") or [] if j.args.get("on")]
    for place in places:
        if any(blocks.is_outer(c, local_aliases) for c in blocks.columns_here(place)):
            raise UnsupportedSql(model, "scalar subquery correlated outside its WHERE clause")


def _equality(model: str, conj: exp.Expr, local_aliases: set) -> tuple:
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
    raise UnsupportedSql(
        model,
        f"scalar subquery correlated by {conj.sql('spark')[:80]} (only equalities "
        "between an outer and an inner expression can be turned into a join)",
    )


def _null_rejecting(sq: exp.Subquery, conj) -> bool:
    """Is `sq` in a comparison (through arithmetic only) that is the WHERE conjunct itself?"""
    if conj is None:
        return False
    node: exp.Expr = sq
    while node is not conj:
        parent = node.parent
        if parent is conj:
            return isinstance(conj, _COMPARISONS)
        if not isinstance(parent, _ARITHMETIC):
            return False
        node = parent
    return False


def _empty_value(model: str, value: exp.Expr) -> exp.Expr:
    """The subquery's value over no rows: COUNT gives 0, SUM/AVG/MIN/MAX/variance NULL, and the
    arithmetic and comparisons around them follow (NULL when any operand is NULL; `COUNT(*) > 0`,
    EXISTS and IN as values, gives 0 > 0: FALSE)."""

    def replace(node):
        if isinstance(node, exp.Count) or (isinstance(node, exp.Anonymous) and node.name.lower() == "count_if"):
            return exp.Literal.number(0)
        if is_aggregate(node):
            if isinstance(node, _NULL_ON_EMPTY):
                return exp.Null()
            raise UnsupportedSql(
                model,
                f"correlated scalar subquery over {node.sql('spark')[:60]} "
                "(only COUNT, SUM, AVG, MIN, MAX and the variance family have a known "
                "value on no rows)",
            )
        if not isinstance(node, _ARITHMETIC + _COMPARISONS + (exp.Literal, exp.Null)):
            raise UnsupportedSql(
                model,
                f"correlated scalar subquery value {value.sql('spark')[:60]} "
                "(only arithmetic and comparisons over aggregates)",
            )
        return node

    empty = blocks.transform_here(value.copy(), replace)
    return exp.Null() if any(isinstance(n, exp.Null) for n in empty.walk()) else empty
