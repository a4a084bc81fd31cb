"""Pass 8: aggregates of DISTINCT values become aggregates over the distinct (group, value) pairs.

    SELECT g, COUNT(DISTINCT x) AS n FROM t WHERE p GROUP BY g
 => SELECT d.k1 AS g, COUNT(d.v1) AS n
    FROM (SELECT g AS k1, x AS v1 FROM t WHERE p GROUP BY g, x) AS d
    GROUP BY d.k1

Equivalent: each group's distinct values of x are exactly its rows of the inner block, so
COUNT / SUM / AVG (DISTINCT x) over the group equal COUNT / SUM / AVG (x) over those rows, and
MIN / MAX (x) are the same over distinct values (NULL is a value of the inner block, and is
skipped by the outer aggregate as by the DISTINCT one). The types are the same: the outer
aggregate reads the same column type.

Why: a DISTINCT aggregate has no algebraic state, so its groups were re-aggregated from the
source's snapshot whenever they changed; with few groups (a status, a region) that is a full scan
on every refresh. Here the outer aggregate adds the change (COUNT and SUM are algebraic), and the
inner block is refreshed for the changed (group, value) pairs only.

Applied where every aggregate of the block reads the same single value and is one of COUNT /
SUM / AVG (DISTINCT x), MIN (x), MAX (x), with at least one DISTINCT; with no FILTER clause,
window or subquery in the block; otherwise the block is left as it was.
"""

from __future__ import annotations

from typing import Optional

from sqlglot import exp

from python_helpers.sql.aggregates import is_aggregate
from python_helpers.sql.rewrites import blocks

_DISTINCT_KINDS = (exp.Count, exp.Sum, exp.Avg)
_PLAIN_KINDS = (exp.Min, exp.Max)


def rewrite(model: str, query: exp.Expr, fresh: blocks.FreshNames) -> exp.Expr:
    for select in blocks.selects_bottom_up(query):
        split = _split(select, fresh)
        if split is not None:
            query = blocks.replace_block(query, select, split)
    return query


def _value_of(call: exp.Expr) -> tuple[Optional[str], bool]:
    """(the text of the value an aggregate reads, whether it is a DISTINCT one), or (None, _)
    for an aggregate this rewrite does not keep equal."""
    inner = call.this
    if isinstance(call, _DISTINCT_KINDS) and isinstance(inner, exp.Distinct):
        values = inner.expressions
        return (values[0].sql("spark"), True) if len(values) == 1 else (None, True)
    if isinstance(call, _PLAIN_KINDS) and isinstance(inner, exp.Expression) and not isinstance(inner, exp.Distinct):
        return inner.sql("spark"), False
    return None, False


def _parts(select: exp.Select) -> list:
    parts = list(select.expressions)
    for key in ("having", "order"):
        if select.args.get(key) is not None:
            parts.append(select.args[key])
    return parts


def _split(select: exp.Select, fresh: blocks.FreshNames) -> Optional[exp.Select]:
    group = select.args.get("group")
    if group is not None and any(group.args.get(k) for k in ("rollup", "cube", "grouping_sets")):
        return None
    keys = list(group.expressions) if group is not None else []
    if any(isinstance(k, exp.Literal) for k in keys):  # GROUP BY 1: a position, not a value
        return None
    parts = _parts(select)
    nodes = [n for p in parts for n in blocks.here(p)]
    if any(isinstance(n, (exp.Window, exp.Filter, exp.Subquery)) or blocks.is_sublink(n) for n in nodes):
        return None
    calls = [n for n in nodes if is_aggregate(n) and not blocks.inside_aggregate(n)]
    if not calls:
        return None
    seen = [_value_of(c) for c in calls]
    texts = {t for t, _ in seen}
    if None in texts or len(texts) != 1 or not any(d for _, d in seen):
        return None
    value = next(c.this.expressions[0] if isinstance(c.this, exp.Distinct) else c.this for c in calls).copy()

    derived, value_name = fresh("__dvm_dv"), fresh("__dvm_v")
    key_names = [fresh("__dvm_k") for _ in keys]
    inner = exp.Select(
        expressions=[exp.alias_(k.copy(), n) for k, n in zip(keys, key_names)] + [exp.alias_(value, value_name)]
    )
    for arg in ("from_", "from", "joins", "laterals", "where"):
        if select.args.get(arg) is not None:
            inner.set(arg, select.args[arg].copy())
    inner.set("group", exp.Group(expressions=[k.copy() for k in keys] + [value.copy()]))

    by_text = {k.sql("spark"): exp.column(n, table=derived) for k, n in zip(keys, key_names)}
    read_value = exp.column(value_name, table=derived)

    def outer_of(node: exp.Expr) -> exp.Expr:
        if is_aggregate(node) and not blocks.inside_aggregate(node):
            return node.__class__(this=read_value.copy())
        if not blocks.inside_aggregate(node):
            text = None if isinstance(node, (exp.Identifier, exp.Literal, exp.Star)) else node.sql("spark")
            if text in by_text:
                return by_text[text].copy()
        return node

    outer = select.copy()
    for arg in ("from_", "from", "joins", "laterals", "where"):
        outer.set(arg, None)
    outer.from_(exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(derived))), copy=False)
    outer.set(
        "expressions",
        [blocks.keep_alias(p, blocks.transform_here(p.copy(), outer_of)) for p in select.expressions],
    )
    for key in ("having", "order"):
        if select.args.get(key) is not None:
            outer.set(key, blocks.transform_here(select.args[key].copy(), outer_of))
    outer.set("group", exp.Group(expressions=list(by_text.values())) if keys else None)
    # Every column the outer block reads must now come from the derived table (or be an output
    # name, as ORDER BY may read).
    outputs = {p.alias_or_name for p in outer.expressions}
    for part in _parts(outer):
        for column in blocks.columns_here(part):
            if column.table != derived and column.name not in outputs:
                return None
    return outer
