"""Pass 4: EXISTS and IN used as values (in the SELECT list, in CASE, as a function argument)
become COUNT subqueries, which the scalar-subquery pass then turns into joins:

    SELECT a.id, CASE WHEN EXISTS (SELECT 1 FROM b WHERE b.k = a.k AND b.v > 0) THEN 'y' ELSE 'n' END
 => SELECT a.id, CASE WHEN (SELECT COUNT(*) > 0 FROM b WHERE b.k = a.k AND b.v > 0) THEN 'y' ELSE 'n' END

EXISTS (q) is TRUE exactly when q has at least one row and is never NULL; COUNT(*) over q's rows
is never NULL either, and 0 exactly when q has none (the scalar pass gives a missing correlated
group the value on no rows, 0 > 0: FALSE). So the two are equal for every outer row. The COUNT
is algebraic, so the flag is maintained by the per-key count of the subquery's rows; the
comparison sits inside the subquery, so only a count that reaches or leaves 0 changes a value.

IN used as a value follows Spark, whose result is not SQL's three-valued one: Spark computes
`x IN (subquery)` outside WHERE as an existence join, TRUE when a row equals x and FALSE
otherwise, never NULL (a NULL x, or a NULL in the subquery, gives FALSE; checked for the Spark
this project pins by tests/spark/test_regressions.py). So, uncorrelated and single-column,

    x IN (SELECT y FROM f WHERE w)  =>  (SELECT COUNT(*) > 0 FROM f WHERE w AND y = x)

`NOT IN` (or `NOT` right around an IN) as a value is left alone: Spark evaluates it
null-aware, and it is refused at the end of the pipeline.

EXISTS and IN in WHERE under only AND / OR / NOT are left to the semi/anti join passes. Only a plain
block (no GROUP BY, HAVING, LIMIT or aggregate of its own; for EXISTS no DISTINCT either, for IN a
DISTINCT does not change membership) is rewritten; its SELECT list does not matter to EXISTS.
An IN whose outer expression names an alias the subquery also defines is left alone (moving x
into the subquery would let that alias capture it). Anything else stays and is refused at the end of the pipeline.
"""

from __future__ import annotations

from sqlglot import exp

from python_helpers.sql.aggregates import is_aggregate
from python_helpers.sql.rewrites import blocks

_CONNECTIVES = (exp.And, exp.Or, exp.Not, exp.Paren)


def rewrite(model: str, query: exp.Expr, fresh: blocks.FreshNames) -> exp.Expr:
    for select in blocks.selects_bottom_up(query):
        for projection in select.expressions:
            for node in list(blocks.here(projection)):
                _replace(node)
        where = select.args.get("where")
        if where is not None:
            for node in list(blocks.here(where.this)):
                if _as_value(node, where):
                    _replace(node)
    return query


def _as_value(node: exp.Expr, top: exp.Expr) -> bool:
    """Is the EXISTS under something other than AND / OR / NOT on its way up to `top`?"""
    up = node.parent
    while up is not None and up is not top:
        if not isinstance(up, _CONNECTIVES):
            return True
        up = up.parent
    return False


def _replace(node: exp.Expr) -> None:
    if isinstance(node, exp.Exists):
        _exists(node)
    elif isinstance(node, exp.In) and node.args.get("query") is not None:
        _in(node)


def _exists(node: exp.Exists) -> None:
    inner = node.this
    if isinstance(inner, exp.Subquery):
        inner = inner.this
    if not isinstance(inner, exp.Select) or any(
        inner.args.get(k) for k in ("group", "having", "distinct", "limit", "offset", "windows")
    ):
        return
    if any(is_aggregate(n) for p in inner.expressions for n in blocks.here(p)):
        return
    node.replace(_flag(inner, []))


def _flag(inner: exp.Select, extra: list) -> exp.Subquery:
    """`(SELECT COUNT(*) > 0 FROM ... WHERE ... AND extra)`: the flag inside the subquery, so its
    value per group is TRUE or FALSE, not the count. A change that moves a count without
    crossing 0 then changes no value, and nothing above the subquery's join is recomputed for
    it (an outer row carrying the count would change with every count it read)."""
    counted = inner.copy()
    flag = exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(0))
    counted.set("expressions", [exp.alias_(flag, "__dvm_n")])
    counted.set("distinct", None)
    counted.set("order", None)
    blocks.set_where(counted, blocks.where_conjuncts(counted) + extra)
    return exp.Subquery(this=counted)


def _in(node: exp.In) -> None:
    query = node.args["query"]
    inner = query.this if isinstance(query, exp.Subquery) else query
    x = node.this
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    if (
        isinstance(parent, exp.Not)
        or not isinstance(inner, exp.Select)
        or isinstance(x, exp.Tuple)
        or len(inner.expressions) != 1
        or any(inner.args.get(k) for k in ("group", "having", "limit", "offset", "windows"))
        or blocks.references_outside(inner)
        or any(is_aggregate(n) or isinstance(n, exp.Window) for n in blocks.here(inner.expressions[0]))
    ):
        return
    # x moves into the subquery's WHERE: an alias of the subquery's own FROM would capture it.
    inner_aliases = {t.alias_or_name.lower() for t in inner.find_all(exp.Table)} | {
        q.alias_or_name.lower() for q in inner.find_all(exp.Subquery) if q.alias_or_name
    }
    if any(c.table and c.table.lower() in inner_aliases for c in x.find_all(exp.Column)):
        return
    y = blocks.unaliased(inner.expressions[0])
    node.replace(_flag(inner, [exp.EQ(this=y.copy(), expression=x.copy())]))
