"""Where a relation's key column copies its values from, so its keys can be listed without a
Spark job.

A key read (key_reads.py) only needs a superset of the keys: the exact restriction is applied
on top in Spark. A relation of keys that copies a column of a change held in the dbt process
(a change read with Arrow, or rows a key read returned), through projections, filters,
groupings and unions, holds no value that column lacks, so the column's distinct values stand
in for the listing job (about 0.1-0.4 s each on two cores).

Pure functions over the SQL the DVM renders: anything else (a join, an expression, a lateral
view, a grouping that adds NULL rows) answers None, and the caller lists the keys in Spark.
"""

from __future__ import annotations

from typing import Optional

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from python_helpers.sql.predicates import conjuncts

# Groupings that output rows whose keys are NULL although no input row's is.
_NULL_ADDING = (exp.Rollup, exp.Cube, exp.GroupingSets)


def held_values(relation: exp.Expr, columns: tuple, held: dict, max_values: int) -> Optional[dict]:
    """{column: distinct values} holding every value of `relation`'s key `columns`, from the
    rows of `held` ({view, lower case: Arrow table}) they copy; None when a column is not such a
    copy or has more than `max_values` values. A copy filtered by `IS NOT NULL` on the way (the
    keys an `=` can meet) gives no NULL: a NULL key would have a read keep every row whose key
    is NULL."""
    out = {}
    for column in columns:
        copied = _by_name(relation, column.lower(), set(held))
        if not copied:
            return None
        parts = []
        for view, source, not_null in copied:
            rows = held[view]
            names = {n.lower(): n for n in rows.column_names}
            if source not in names:
                return None
            values = pc.unique(rows.column(names[source]))
            parts.append(pc.drop_null(values) if not_null else values)
        try:
            values = pc.unique(pa.chunked_array([p.cast(parts[0].type) for p in parts]))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None
        if len(values) > max_values:
            return None
        out[column] = values
    return out


def sources(relation: exp.Expr, column: str, tables: set) -> Optional[list]:
    """[(table, column) ...] of `tables` (lower-case names) whose values, taken together, hold
    every value of `relation`'s output `column`; None when that cannot be shown."""
    found = _by_name(relation, column.lower(), tables)
    return None if found is None else [(table, name) for table, name, _ in found]


def _by_name(node: exp.Expr, column: str, tables: set) -> Optional[list]:
    """[(table, column, NULLs dropped on the way) ...]: sources() with the filter's mark."""
    node = _unwrapped(node)
    if isinstance(node, exp.Table):
        name = node.name.lower()
        return [(name, column, False)] if not node.args.get("db") and name in tables else None
    if isinstance(node, exp.SetOperation):
        position = _position(_unwrapped(node.left), column)
        return None if position is None else _by_position(node, position, tables)
    if not isinstance(node, exp.Select):
        return None
    projected = _projected(node, column)
    if projected is None:
        return None
    source = node.args.get("from_")
    if source is None:
        return None
    return _not_null(_by_name(source.this, projected, tables), node, projected)


def _by_position(node: exp.Expr, position: int, tables: set) -> Optional[list]:
    node = _unwrapped(node)
    if isinstance(node, exp.Union):
        left = _by_position(node.left, position, tables)
        right = _by_position(node.right, position, tables)
        return None if left is None or right is None else left + right
    if isinstance(node, exp.SetOperation):  # EXCEPT, INTERSECT: a part of the left side's rows
        return _by_position(node.left, position, tables)
    if not isinstance(node, exp.Select):
        return None
    if _star_only(node):
        # `SELECT * FROM x WHERE ...` (a set operation's part filtered): x's column there.
        inner = node.args["from_"].this
        return _not_null(_by_position(inner, position, tables), node, _name_at(inner, position))
    names = [p.alias_or_name.lower() for p in node.expressions]
    if position >= len(names) or "*" in names or names.count(names[position]) != 1:
        return None  # (a position a star or a repeated name leaves unclear: not followed)
    return _by_name(node, names[position], tables) if names[position] else None


def _projected(select: exp.Select, column: str) -> Optional[str]:
    """The column of `select`'s FROM that its output `column` copies, or None (not a plain
    copy, or a SELECT this module does not follow)."""
    if select.args.get("joins") or select.args.get("laterals"):
        return None
    group = select.args.get("group")
    if group is not None and any(group.find(kind) for kind in _NULL_ADDING):
        return None
    source = select.args.get("from_")
    alias = source.this.alias_or_name.lower() if source is not None else None
    star = False
    for projection in select.expressions:
        if isinstance(projection, exp.Star):
            star = True
            continue
        if projection.alias_or_name.lower() != column:
            continue
        copied = projection.this if isinstance(projection, exp.Alias) else projection
        if not isinstance(copied, exp.Column) or copied.table.lower() not in ("", alias):
            return None
        return copied.name.lower()
    return column if star else None


def _not_null(found: Optional[list], select: exp.Select, column: Optional[str]) -> Optional[list]:
    """`found` marked as NULL-free where `select`'s WHERE keeps only rows whose FROM `column`
    is not NULL (`NOT (c IS NULL)`, `c IS NOT NULL`, one of its AND-ed conditions)."""
    if found is None or column is None:
        return found
    where = select.args.get("where")
    source = select.args.get("from_")
    alias = source.this.alias_or_name.lower() if source is not None else None
    for condition in conjuncts(where.this if where is not None else None):
        tested = condition.this if isinstance(condition, exp.Not) else None
        while isinstance(tested, exp.Paren):
            tested = tested.this
        if (
            isinstance(tested, exp.Is)
            and isinstance(tested.expression, exp.Null)
            and isinstance(tested.this, exp.Column)
            and tested.this.name.lower() == column
            and tested.this.table.lower() in ("", alias)
        ):
            return [(table, name, True) for table, name, _ in found]
    return found


def _name_at(node: exp.Expr, position: int) -> Optional[str]:
    """The name of the output column at `position` of `node`, None where it is not plain."""
    node = _first_select(node)
    if not isinstance(node, exp.Select) or position >= len(node.expressions):
        return None
    name = node.expressions[position].alias_or_name
    return name.lower() if name and name != "*" else None


def _first_select(node: exp.Expr) -> exp.Expr:
    """The SELECT that names `node`'s output columns: a set operation's first part, through
    filtered `SELECT *`s."""
    node = _unwrapped(node)
    while isinstance(node, exp.SetOperation) or (isinstance(node, exp.Select) and _star_only(node)):
        node = _unwrapped(node.left if isinstance(node, exp.SetOperation) else node.args["from_"].this)
    return node


def _star_only(select: exp.Select) -> bool:
    """`SELECT * FROM one relation`, filtered or not: its columns are its FROM's, in order."""
    return (
        len(select.expressions) == 1
        and isinstance(select.expressions[0], exp.Star)
        and select.args.get("from_") is not None
        and not any(select.args.get(k) for k in ("joins", "laterals", "group"))
    )


def _position(node: exp.Expr, column: str) -> Optional[int]:
    """The position of output `column` in a set operation's first SELECT."""
    node = _first_select(node)
    if not isinstance(node, exp.Select):
        return None
    names = [p.alias_or_name.lower() for p in node.expressions]
    if any(isinstance(p, exp.Star) for p in node.expressions) or names.count(column) != 1:
        return None
    return names.index(column)


def _unwrapped(node: exp.Expr) -> exp.Expr:
    while isinstance(node, (exp.Subquery, exp.Paren)):
        node = node.this
    return node
