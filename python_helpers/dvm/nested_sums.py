"""A consolidation below a result's root consolidation, through nothing that reads the
weights, left out.

A consolidation (sqlgen.consolidate: GROUP BY the columns, SUM(__dvm_w), HAVING the sum <> 0)
whose input reaches a second consolidation only through UNION ALL and SELECTs that copy
__dvm_w and read it nowhere else (projections and filters of the other columns) sums, per
output row, the same weights with or without the inner one: the rows the inner one merges or
drops as cancelled have the same values above it, and their weights add up to what it
outputs. Each consolidation is a shuffle, a stage of its own: in a key-restricted recompute
under a bag's root (an `IN` used as a value) the inner one cost 0.4-0.5 s of a 3 s query in a
fresh JVM, on a few hundred rows.

Only a result's root asks for it (`consolidate(..., fold=True)`): a delta that the rules read
in several places (a change's keys, its old rows, its unmatched rows) would otherwise be
rendered grouped in some and not in others, and Spark reuses a shuffle, and the read estimate
counts a read once, only where the copies are the same. The projections above now also see
rows the inner one dropped as cancelled; those are rows of the old or new version, which a
recompute evaluates too.

Pure functions over the SQL the rules render; anything else (a join, a grouping, a generator,
a weight read in an expression, a set operation's own limit) is left as it is.
"""

from __future__ import annotations

from sqlglot import exp

from python_helpers.dvm.tree import WEIGHT

# Clauses of a set operation over its rows as a whole.
_SET_LEVEL = ("limit", "offset", "order")
# Clauses a SELECT that passes weights through (or a consolidation) must not have.
_BLOCKING = ("joins", "laterals", "group", "having", "distinct", "limit", "offset", "order", "qualify", "windows")


def without_inner_sums(query: exp.Expr) -> exp.Expr:
    """`query` (the input of a consolidation) with the consolidations it passes its weights
    through to replaced by their own input; a copy, `query` is left as it is."""
    return _folded(query.copy())


def _folded(query: exp.Expr) -> exp.Expr:
    """`_folded` in place over a tree of its own (the copy above): the node to use."""
    if isinstance(query, exp.Subquery):
        if _plain_subquery(query):
            query.set("this", _folded(query.this))
        return query
    if isinstance(query, exp.Union):
        # UNION ALL only (`distinct` is False, not absent), and nothing over its rows as a set.
        if query.args.get("distinct") is False and not any(query.args.get(k) for k in _SET_LEVEL):
            query.set("this", _folded(query.this))
            query.set("expression", _folded(query.expression))
        return query
    if not isinstance(query, exp.Select):
        return query
    source = _single_source(query)
    if source is None:
        return query
    if _is_consolidation(query):
        for key in ("group", "having"):
            query.set(key, None)
        query.set("expressions", [_plain_weight(e) for e in query.expressions])
    elif not _passes_weight(query):
        return query
    source.set("this", _folded(source.this))
    return query


def _plain_subquery(subquery: exp.Subquery) -> bool:
    """A derived table with an alias and nothing else (no sample, pivot, limit of its own)."""
    return all(key in ("this", "alias") for key, value in subquery.args.items() if value)


def _single_source(select: exp.Select):
    """The derived table `select` reads, when it reads one plain one and nothing else."""
    source = select.args.get("from_")
    if source is None or not isinstance(source.this, exp.Subquery) or not _plain_subquery(source.this):
        return None
    if any(select.args.get(k) for k in ("joins", "laterals")):
        return None
    return source.this


def _is_weight(node: exp.Expr) -> bool:
    return isinstance(node, exp.Column) and node.name.lower() == WEIGHT


def _is_sum_of_weights(node: exp.Expr) -> bool:
    return isinstance(node, exp.Sum) and _is_weight(node.this)


def _is_consolidation(select: exp.Select) -> bool:
    """GROUP BY plain columns, each projected as it is, SUM(__dvm_w) AS __dvm_w, HAVING that
    sum <> 0, nothing else (sqlgen.consolidate's form)."""
    having = select.args.get("having")
    condition = having.this if having is not None else None
    if not (
        isinstance(condition, exp.NEQ)
        and _is_sum_of_weights(condition.this)
        and isinstance(condition.expression, exp.Literal)
        and condition.expression.this == "0"
    ):
        return False
    if any(select.args.get(k) for k in ("where", "distinct", "limit", "offset", "order", "qualify", "windows")):
        return False
    columns = [e for e in select.expressions if isinstance(e, exp.Column)]
    sums = [e for e in select.expressions if isinstance(e, exp.Alias) and _is_sum_of_weights(e.this)]
    if len(columns) + len(sums) != len(select.expressions) or len(sums) != 1 or sums[0].alias.lower() != WEIGHT:
        return False
    group = select.args.get("group")
    grouped = list(group.expressions) if group is not None else []
    if group is not None and any(value for key, value in group.args.items() if key != "expressions"):
        return False  # ROLLUP, CUBE, GROUPING SETS: rows of their own
    if any(not isinstance(g, exp.Column) for g in grouped):
        return False
    return sorted(g.name for g in grouped) == sorted(c.name for c in columns)


def _plain_weight(projection: exp.Expr) -> exp.Expr:
    if isinstance(projection, exp.Alias) and _is_sum_of_weights(projection.this):
        return exp.column(WEIGHT)
    return projection


def _passes_weight(select: exp.Select) -> bool:
    """Does `select` copy __dvm_w as it is, read it nowhere else and do nothing that depends on
    its rows being consolidated (grouping, distinct, limits, windows, generators)?"""
    if any(select.args.get(k) for k in _BLOCKING):
        return False
    copies = 0
    for projection in select.expressions:
        if isinstance(projection, exp.Star):
            copies += 1
            continue
        target = projection.this if isinstance(projection, exp.Alias) else projection
        if _is_weight(target) and projection.alias_or_name.lower() == WEIGHT:
            copies += 1
            continue
        if projection.alias_or_name.lower() == WEIGHT or _reads_weight(projection):
            return False
        if projection.find(exp.AggFunc, exp.Window, exp.Explode, exp.Subquery):
            return False
    where = select.args.get("where")
    return copies == 1 and not (where is not None and (_reads_weight(where) or where.find(exp.Subquery)))


def _reads_weight(node: exp.Expr) -> bool:
    return any(_is_weight(c) for c in node.find_all(exp.Column))
