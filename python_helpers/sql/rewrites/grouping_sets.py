"""Pass 2: GROUPING SETS, ROLLUP and CUBE become one plain GROUP BY over the rows repeated once
per grouping set (as Spark's own Expand does), or a UNION ALL of plain GROUP BY branches.

    SELECT a, b, SUM(x), GROUPING(b) FROM t GROUP BY ROLLUP(a, b)
 => SELECT a, CASE WHEN g & 1 = 0 THEN b END AS b, SUM(x), CAST(g >> 0 & 1 AS TINYINT)
    FROM t LATERAL VIEW EXPLODE(ARRAY(0, 1, 3)) s AS g
    GROUP BY a, CASE WHEN g & 1 = 0 THEN b END, g

`g` is the set's GROUPING_ID() (a bit per grouping column, the first the highest, 1 where the
column is outside the set). Each row is counted once in each set's group, where the columns
outside the set read NULL; aggregate arguments keep the real values. One aggregate is maintained
with its state in the stored result (COUNT / SUM / AVG add the change; nothing is recomputed
from the snapshots), where a UNION ALL of aggregates recomputes each touched group at both
versions. Like Spark, no row over an empty input (the empty set too).

The UNION ALL form (used when two sets are the same set, whose rows Spark repeats, or a GROUPING
function names a column outside the grouping columns):

    SELECT a, b, SUM(x), CAST(0 AS TINYINT) FROM t GROUP BY a, b
    UNION ALL SELECT a, NULL, SUM(x), CAST(1 AS TINYINT) FROM t GROUP BY a
    UNION ALL SELECT NULL, NULL, SUM(x), CAST(1 AS TINYINT) FROM t GROUP BY TRUE

SELECT DISTINCT makes the union distinct. More than MAX_BRANCHES sets is rejected.
"""

from __future__ import annotations

import itertools

from sqlglot import exp

from python_helpers.errors import UnsupportedSql
from python_helpers.sql.rewrites import blocks

MAX_BRANCHES = 32


def rewrite(model: str, query: exp.Expr, fresh: blocks.FreshNames) -> exp.Expr:
    for select in blocks.selects_bottom_up(query):
        group = select.args.get("group")
        if group is None or not _has_sets(group):
            continue
        query = blocks.replace_block(query, select, _expand(model, select, fresh))
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


def _expand(model: str, select: exp.Select, fresh: blocks.FreshNames) -> exp.Expr:
    if select.args["group"].args.get("grouping_sets"):
        raise UnsupportedSql(model, "GROUP BY a, b GROUPING SETS (...) (write GROUP BY GROUPING SETS (...))")
    if any(isinstance(n, exp.Window) for p in select.expressions for n in blocks.here(p)):
        raise UnsupportedSql(
            model, "window functions over GROUPING SETS / ROLLUP / CUBE (they rank across all grouping sets together)"
        )
    columns, sets = _sets_of(model, select.args["group"])
    texts = [c.sql("spark") for c in columns]
    if _expandable(select, texts, sets):
        return _one_aggregate(select, columns, sets, fresh)
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
            if node.sql("spark") in texts and node.sql("spark") not in present and not blocks.inside_aggregate(node):
                return exp.Null()
            return node

        branch.set("expressions", [blocks.keep_alias(p, p.copy().transform(fill)) for p in select.expressions])
        if select.args.get("having") is not None:
            branch.set("having", exp.Having(this=select.args["having"].this.copy().transform(fill)))
        branches.append(branch)
    return blocks.union_of(branches, select)


def _set_id(texts: list, grouping_set: list) -> int:
    """GROUPING_ID() of the set: bit n-1-i set where column i is outside it."""
    present = {c.sql("spark") for c in grouping_set}
    return sum(1 << (len(texts) - 1 - i) for i, t in enumerate(texts) if t not in present)


def _grouping_args(select: exp.Select) -> list:
    """The arguments of every GROUPING / GROUPING_ID call of the block (texts; [] for GROUPING_ID())."""
    found = []
    for node in select.walk():
        if isinstance(node, (exp.Grouping, exp.GroupingId)) or (
            isinstance(node, exp.Anonymous) and node.name.lower() in ("grouping", "grouping_id")
        ):
            found.append([a.sql("spark") for a in node.expressions])
    return found


def _expandable(select: exp.Select, texts: list, sets: list) -> bool:
    ids = [_set_id(texts, s) for s in sets]
    if len(set(ids)) != len(ids) or len(texts) > 62:  # a set repeated: Spark repeats its rows
        return False
    # A subquery becomes a join later (passes 4-7), and a join's ON clause cannot read the
    # LATERAL VIEW's set id (Spark applies LATERAL VIEW after the joins).
    parts = list(select.expressions) + [select.args[k] for k in ("having", "order") if select.args.get(k)]
    if any(isinstance(n, exp.Subquery) or blocks.is_sublink(n) for p in parts for n in p.walk()):
        return False
    return all(a in texts for args in _grouping_args(select) for a in args)


def _one_aggregate(select: exp.Select, columns: list, sets: list, fresh: blocks.FreshNames) -> exp.Select:
    """The block as one GROUP BY over its rows repeated per grouping set (the module's text)."""
    texts = [c.sql("spark") for c in columns]
    n = len(texts)
    view, name = fresh("__dvm_gs"), fresh("__dvm_gid")
    set_id = exp.column(name, table=view)
    ids = [_set_id(texts, s) for s in sets]

    def bit(i: int) -> exp.Expr:  # 1 where column i is outside the row's set
        shifted = exp.BitwiseRightShift(this=set_id.copy(), expression=exp.Literal.number(n - 1 - i))
        return exp.BitwiseAnd(this=exp.paren(shifted, copy=False), expression=exp.Literal.number(1))

    keys = {}
    for i, (c, t) in enumerate(zip(columns, texts)):
        if all(_set_id(texts, s) >> (n - 1 - i) & 1 == 0 for s in sets):
            keys[t] = c.copy()  # in every set: never NULLed
        else:
            keys[t] = exp.Case(ifs=[exp.If(this=exp.EQ(this=bit(i), expression=exp.Literal.number(0)), true=c.copy())])

    def fill(node):
        grouping = isinstance(node, exp.Grouping) or (
            isinstance(node, exp.Anonymous) and node.name.lower() == "grouping"
        )
        if grouping:
            return exp.Cast(this=bit(texts.index(node.expressions[0].sql("spark"))), to=exp.DataType.build("tinyint"))
        if isinstance(node, exp.GroupingId) or (isinstance(node, exp.Anonymous) and node.name.lower() == "grouping_id"):
            args = [a.sql("spark") for a in node.expressions]
            if not args or args == texts:
                return exp.Cast(this=set_id.copy(), to=exp.DataType.build("bigint"))
            value: exp.Expr = exp.Literal.number(0)
            for j, a in enumerate(args):
                shifted = exp.BitwiseLeftShift(
                    this=exp.paren(bit(texts.index(a))), expression=exp.Literal.number(len(args) - 1 - j)
                )
                value = exp.Add(this=value, expression=exp.paren(shifted, copy=False))
            return exp.Cast(this=value, to=exp.DataType.build("bigint"))
        text = None if isinstance(node, (exp.Identifier, exp.Literal, exp.Star)) else node.sql("spark")
        if text in keys and not blocks.inside_aggregate(node):
            return keys[text].copy()
        return node

    out = select.copy()
    out.set("expressions", [blocks.keep_alias(p, p.copy().transform(fill)) for p in select.expressions])
    if select.args.get("having") is not None:
        out.set("having", exp.Having(this=select.args["having"].this.copy().transform(fill)))
    if select.args.get("order") is not None:
        out.set("order", select.args["order"].copy().transform(fill))
    out.set("group", exp.Group(expressions=[keys[t].copy() for t in texts] + [set_id.copy()]))
    generator = exp.Explode(this=exp.Array(expressions=[exp.Literal.number(i) for i in ids]))
    lateral = exp.Lateral(
        this=generator,
        view=True,
        outer=False,
        alias=exp.TableAlias(this=exp.to_identifier(view), columns=[exp.to_identifier(name)]),
    )
    out.set("laterals", list(out.args.get("laterals") or []) + [lateral])
    return out
