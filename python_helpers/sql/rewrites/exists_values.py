"""Pass 2a: EXISTS used as a value (in the SELECT list, in CASE, as a function argument) becomes
a COUNT subquery, which the scalar-subquery pass then turns into a join:

    SELECT a.id, CASE WHEN EXISTS (SELECT 1 FROM b WHERE b.k = a.k AND b.v > 0) THEN 'y' ELSE 'n' END
 => SELECT a.id, CASE WHEN (SELECT COUNT(*) FROM b WHERE b.k = a.k AND b.v > 0) > 0 THEN 'y' ELSE 'n' END

EXISTS (q) is TRUE exactly when q has at least one row and is never NULL; COUNT(*) over q's rows
is never NULL either, and 0 exactly when q has none (the scalar pass gives a missing correlated
group the COUNT of no rows, 0). So the two are equal for every outer row. The COUNT is
algebraic, so the flag is maintained by the per-key count of the subquery's rows.

EXISTS in WHERE under only AND / OR / NOT is left to the semi/anti join passes. Only a plain
block (no GROUP BY, HAVING, DISTINCT, LIMIT or aggregate of its own) is rewritten; its SELECT list
does not matter to EXISTS. Anything else stays and is refused at the end of the pipeline.
"""
from __future__ import annotations

from sqlglot import exp

from python_helpers.sql.aggregates import is_aggregate
from python_helpers.sql.rewrites import blocks

_CONNECTIVES = (exp.And, exp.Or, exp.Not, exp.Paren)


def rewrite(model: str, query: exp.Expression, fresh: blocks.FreshNames) -> exp.Expression:
    for select in blocks.selects_bottom_up(query):
        for projection in select.expressions:
            for node in list(blocks.here(projection)):
                if isinstance(node, exp.Exists):
                    _replace(node)
        where = select.args.get("where")
        if where is not None:
            for node in list(blocks.here(where.this)):
                if isinstance(node, exp.Exists) and _as_value(node, where):
                    _replace(node)
    return query


def _as_value(node: exp.Expression, top: exp.Expression) -> bool:
    """Is the EXISTS under something other than AND / OR / NOT on its way up to `top`?"""
    node = node.parent
    while node is not None and node is not top:
        if not isinstance(node, _CONNECTIVES):
            return True
        node = node.parent
    return False


def _replace(node: exp.Exists) -> None:
    inner = node.this
    if isinstance(inner, exp.Subquery):
        inner = inner.this
    if not isinstance(inner, exp.Select) or any(inner.args.get(k) for k in (
            "group", "having", "distinct", "limit", "offset", "windows")):
        return
    if any(is_aggregate(n) for p in inner.expressions for n in blocks.here(p)):
        return
    counted = inner.copy()
    counted.set("expressions", [exp.alias_(exp.Count(this=exp.Star()), "__dvm_n")])
    counted.set("order", None)
    node.replace(exp.GT(this=exp.Subquery(this=counted), expression=exp.Literal.number(0)))
