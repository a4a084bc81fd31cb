"""Pass 2: GROUPING SETS, ROLLUP and CUBE become a UNION ALL of plain GROUP BY branches.

    SELECT a, b, SUM(x), GROUPING(b) FROM t GROUP BY ROLLUP(a, b)
 => SELECT a, b, SUM(x), CAST(0 AS TINYINT) FROM t GROUP BY a, b
    UNION ALL SELECT a, NULL, SUM(x), CAST(1 AS TINYINT) FROM t GROUP BY a
    UNION ALL SELECT NULL, NULL, SUM(x), CAST(1 AS TINYINT) FROM t GROUP BY TRUE

Equivalent: each grouping set aggregates the same filtered rows by its own keys, and shows the
grouping columns outside the set as NULL; GROUPING(c) is 1 exactly for those, GROUPING_ID() their
bit vector (first column the highest bit). The empty set groups by a constant, so (as in Spark)
it yields no row over an empty input. SELECT DISTINCT makes the union distinct. More than
MAX_BRANCHES sets is rejected (each branch is maintained, and costs, on its own).
"""

from __future__ import annotations

import itertools

from sqlglot import exp

from python_helpers.errors import UnsupportedSql
from python_helpers.sql.aggregates import is_aggregate
from python_helpers.sql.rewrites import blocks

MAX_BRANCHES = 32


def rewrite(model: str, query: exp.Expr, fresh: blocks.FreshNames) -> exp.Expr:
    for select in blocks.selects_bottom_up(query):
        group = select.args.get("group")
        if group is None or not _has_sets(group):
            continue
        query = blocks.replace_block(query, select, _expand(model, select))
    return query


def _has_sets(group: exp.Group) -> bool:
    return bool(group.args.get("rollup") or group.args.get("cube") or group.args.get("grouping_sets")) or any(
        isinstance(e, (exp.Rollup, exp.Cube, exp.GroupingSets)) for e in group.expressions
    )


def _sets_of(model: str, group: exp.Group) -> tuple[list, list]:
    """(every grouping column in order, the list of grouping sets as lists of columns)."""
    columns: list = []
    factors: list = []  # each: a list of alternative sets; the grouping sets are their products

    def add(e):
        if e.sql("spark") not in [c.sql("spark") for c in columns]:
            columns.append(e)

    def items(e):
        return list(e.expressions) if isinstance(e, exp.Tuple) else [e.this if isinstance(e, exp.Paren) else e]

    plain = []
    for e in group.expressions:
        if isinstance(e, exp.Rollup):
            cols = list(e.expressions)
            for c in cols:
                add(c)
            factors.append([cols[:i] for i in range(len(cols), -1, -1)])
        elif isinstance(e, exp.Cube):
            cols = list(e.expressions)
            for c in cols:
                add(c)
            factors.append(
                [
                    [c for c, keep in zip(cols, mask) if keep]
                    for mask in itertools.product([True, False], repeat=len(cols))
                ]
            )
        elif isinstance(e, exp.GroupingSets):
            alternatives = []
            for s in e.expressions:
                cols = items(s)
                for c in cols:
                    add(c)
                alternatives.append(cols)
            factors.append(alternatives)
        else:
            add(e)
            plain.append(e)
    if group.args.get("rollup"):  # GROUP BY a, b WITH ROLLUP
        factors.append([plain[:i] for i in range(len(plain), -1, -1)])
        plain = []
    elif group.args.get("cube"):
        factors.append(
            [
                [c for c, keep in zip(plain, mask) if keep]
                for mask in itertools.product([True, False], repeat=len(plain))
            ]
        )
        plain = []
    sets = [list(plain)]
    for alternatives in factors:
        sets = [s + alt for s in sets for alt in alternatives]
        if len(sets) > MAX_BRANCHES:
            raise UnsupportedSql(
                model, f"more than {MAX_BRANCHES} grouping sets (each is maintained as its own branch); split the model"
            )
    return columns, sets


def _expand(model: str, select: exp.Select) -> exp.Expr:
    if select.args["group"].args.get("grouping_sets"):
        raise UnsupportedSql(model, "GROUP BY a, b GROUPING SETS (...) (write GROUP BY GROUPING SETS (...))")
    if any(isinstance(n, exp.Window) for p in select.expressions for n in blocks.here(p)):
        raise UnsupportedSql(
            model, "window functions over GROUPING SETS / ROLLUP / CUBE (they rank across all grouping sets together)"
        )
    columns, sets = _sets_of(model, select.args["group"])
    texts = [c.sql("spark") for c in columns]
    branches = []
    for s in sets:
        present = {c.sql("spark") for c in s}
        branch = select.copy()
        for key in ("with_", "with", "order", "limit", "offset", "distinct"):
            branch.set(key, None)
        branch.set("group", exp.Group(expressions=[c.copy() for c in s] or [exp.true()]))

        def fill(node, present=present):
            if isinstance(node, exp.Grouping) or (isinstance(node, exp.Anonymous) and node.name.lower() == "grouping"):
                args = node.expressions if isinstance(node, exp.Grouping) else node.expressions
                bit = 0 if args and args[0].sql("spark") in present else 1
                return exp.Cast(this=exp.Literal.number(bit), to=exp.DataType.build("tinyint"))
            if isinstance(node, exp.GroupingId) or (
                isinstance(node, exp.Anonymous) and node.name.lower() == "grouping_id"
            ):
                args = [a.sql("spark") for a in node.expressions] or texts
                value = sum(1 << (len(args) - 1 - i) for i, a in enumerate(args) if a not in present)
                return exp.Cast(this=exp.Literal.number(value), to=exp.DataType.build("bigint"))
            if node.sql("spark") in texts and node.sql("spark") not in present and not _inside_aggregate(node):
                return exp.Null()
            return node

        branch.set("expressions", [_keep_alias(p, p.copy().transform(fill)) for p in select.expressions])
        if select.args.get("having") is not None:
            branch.set("having", exp.Having(this=select.args["having"].this.copy().transform(fill)))
        branches.append(branch)
    return blocks.union_of(branches, select)


def _keep_alias(original: exp.Expr, new: exp.Expr) -> exp.Expr:
    return new if isinstance(new, exp.Alias) else exp.alias_(new, original.alias_or_name)


def _inside_aggregate(node: exp.Expr) -> bool:
    parent = node.parent
    while parent is not None:
        if is_aggregate(parent):
            return True
        parent = parent.parent
    return False
