"""Pass 1: LATERAL in FROM (a generator function, or a correlated subquery) becomes a form the
other passes and the tree builder maintain.

Generator functions:

    FROM t, LATERAL explode(t.arr) AS e(x)          =>  FROM t LATERAL VIEW explode(t.arr) e AS x
    FROM t LEFT JOIN LATERAL explode(t.arr) e(x) ON TRUE  =>  ... LATERAL VIEW OUTER ...

A LATERAL VIEW is applied after the block's joins. Moving the generator there is exact because
it reads only the row it expands: inner and LEFT joins after it see each expanded row with its
input row's columns either way. A later RIGHT / FULL join (which pads rows with NULLs that the
generator would then see), or a later ON clause that reads the generated columns, is refused.

Subqueries (correlated by the columns of the FROM items before them):

- FROM-less, `LATERAL (SELECT t.a + 1 AS b)`: exactly one row per outer row, so `s.b` is its
  expression and the item goes away.
- An aggregate without GROUP BY, `LATERAL (SELECT max(u.b) AS m FROM u WHERE u.k = t.k)`: also
  exactly one row per outer row, so `s.m` is the scalar subquery `(SELECT max(u.b) FROM u WHERE
  u.k = t.k)`, which the scalar-subquery pass turns into a join.
- A plain block, `[LEFT] JOIN LATERAL (SELECT e(u, t) AS c FROM u WHERE p(u) AND q(u, t)) s`:
  one row per matching inner row, which is the join `[LEFT] JOIN (SELECT u.* FROM u WHERE p(u))
  s ON q(u, t)`, with `s.c` replaced by e(u, t) over the derived table's columns. For LEFT the
  replacement is NULL where nothing matched, as the padded lateral row was.

Anything else (GROUP BY, DISTINCT, LIMIT, windows, correlation outside WHERE and the SELECT list)
is refused with the reason.
"""

from __future__ import annotations

from sqlglot import exp

from python_helpers.errors import UnsupportedSql
from python_helpers.sql.aggregates import is_aggregate
from python_helpers.sql.rewrites import blocks


def rewrite(model: str, query: exp.Expr, fresh: blocks.FreshNames) -> exp.Expr:
    for select in blocks.selects_bottom_up(query):
        joins = select.args.get("joins") or []
        for i, join in enumerate(list(joins)):
            if isinstance(join.this, exp.Lateral) and not join.this.args.get("view"):
                _one(model, select, join, joins[i + 1 :], fresh)
    return query


def _side(model: str, join: exp.Join) -> str:
    """'inner' or 'left'; the ON clause of a lateral join must be absent or TRUE."""
    on = join.args.get("on")
    if on is not None and not (isinstance(on, exp.Boolean) and on.this is True):
        raise UnsupportedSql(model, "JOIN LATERAL ... ON <condition> (write the condition inside the subquery)")
    side = (join.side or "").upper()
    if side in ("", "INNER") and (join.kind or "").upper() in ("", "INNER", "CROSS"):
        return "inner"
    if side == "LEFT" and (join.kind or "").upper() in ("", "OUTER"):
        return "left"
    raise UnsupportedSql(model, f"{side} JOIN LATERAL")


def _one(model: str, select: exp.Select, join: exp.Join, later: list, fresh: blocks.FreshNames) -> None:
    lateral = join.this
    side = _side(model, join)
    alias = lateral.args.get("alias")
    name = alias.name.lower() if alias is not None and alias.name else None
    body = lateral.this
    if isinstance(body, exp.Subquery):
        if name is None:
            raise UnsupportedSql(model, "LATERAL subquery without an alias")
        columns = [c.name.lower() for c in alias.columns] if alias.columns else None
        replacements = _subquery(model, select, join, body.this, name, side, fresh, columns, later)
        # A later LATERAL may read this one's columns (chained LATERALs): replace them there too.
        for j in later:
            if isinstance(j.this, exp.Lateral) and not j.this.args.get("view"):
                _substitute_nested(model, j.this, name, replacements)
    else:
        _generator(model, select, join, body, alias, name, side, later)


def _generator(model, select, join, generator, alias, name, side, later) -> None:
    if alias is None or not alias.columns:
        raise UnsupportedSql(
            model, f"LATERAL {generator.sql('spark')[:40]} without column names (write LATERAL explode(...) AS e(x))"
        )
    if not any(isinstance(c, exp.Column) for c in generator.find_all(exp.Column)):
        raise UnsupportedSql(
            model,
            f"generator {generator.sql('spark')[:40]} that reads no table (a constant relation has no change feed)",
        )
    for j in later:
        if (j.side or "").upper() in ("RIGHT", "FULL"):
            raise UnsupportedSql(model, "LATERAL generator followed by a RIGHT or FULL join")
        on = j.args.get("on")
        if on is not None and any(c.table.lower() == name for c in on.find_all(exp.Column)):
            raise UnsupportedSql(model, f"a JOIN's ON clause reads the generated columns of {name}")
        if any(c.table.lower() == name for c in j.this.find_all(exp.Column)):
            raise UnsupportedSql(
                model,
                f"a later LATERAL reads the generated columns of {name} (a LATERAL VIEW is applied after the joins)",
            )
    view = exp.Lateral(
        this=generator.copy(),
        view=True,
        outer=side == "left",
        alias=exp.TableAlias(this=exp.to_identifier(name), columns=[c.copy() for c in alias.columns]),
    )
    join.pop()
    laterals = list(select.args.get("laterals") or [])
    select.set("laterals", laterals + [view])


def _outputs(model: str, inner: exp.Select, columns) -> dict:
    """Output column -> expression; a column list on the alias renames by position."""
    exprs = [blocks.unaliased(p) for p in inner.expressions]
    names = [p.alias_or_name.lower() for p in inner.expressions]
    if columns is not None:
        if len(columns) != len(exprs):
            raise UnsupportedSql(model, "LATERAL alias with a column list of another length than its SELECT list")
        names = columns
    return dict(zip(names, exprs))


def _subquery(model, select, join, inner, name, side, fresh, columns, later) -> dict:
    if not isinstance(inner, exp.Select):
        raise UnsupportedSql(model, "LATERAL over a set operation")
    for key in ("group", "having", "distinct", "limit", "offset", "windows", "order", "laterals"):
        if inner.args.get(key):
            raise UnsupportedSql(
                model,
                f"LATERAL subquery with {key.upper()} (only a plain or one-row aggregate block is turned into a join)",
            )
    if any(isinstance(n, exp.Window) for p in inner.expressions for n in p.walk()):
        raise UnsupportedSql(model, "LATERAL subquery with a window function")
    outputs = _outputs(model, inner, columns)
    from_ = inner.args.get("from_") or inner.args.get("from")
    aggregated = [is_aggregate_expr(e) for e in outputs.values()]
    for c in _nested_conditions(inner):
        if blocks.references_outside(c):
            raise UnsupportedSql(model, "LATERAL subquery with a nested subquery that reads the outer row")
    if (from_ is None or all(aggregated)) and any((j.side or "").upper() in ("RIGHT", "FULL") for j in later):
        # Its columns become expressions over the outer row, which a later RIGHT / FULL join
        # pads with NULLs where the LATERAL row itself would have been all NULL.
        raise UnsupportedSql(model, "one-row LATERAL subquery followed by a RIGHT or FULL join")
    if from_ is None:
        if inner.args.get("where") is not None:
            raise UnsupportedSql(model, "LATERAL (SELECT ... WHERE ...) without FROM")
        if any(aggregated):
            raise UnsupportedSql(model, "LATERAL (SELECT <aggregate>) without FROM")
        replacements = {c: e.copy() for c, e in outputs.items()}
    elif all(aggregated):
        replacements = {}
        for c, e in outputs.items():
            one = inner.copy()
            one.set("expressions", [exp.alias_(e.copy(), "__dvm_v")])
            replacements[c] = exp.Subquery(this=one)
    elif any(aggregated):
        raise UnsupportedSql(model, "LATERAL subquery mixing aggregates and plain columns without GROUP BY")
    else:
        replacements = _as_join(model, select, join, inner, outputs, side, fresh)
        _substitute(select, name, replacements)
        return replacements
    join.pop()
    _substitute(select, name, replacements)
    return replacements


def _nested_conditions(inner: exp.Select) -> list:
    """The nested queries inside the LATERAL body (its own subqueries)."""
    return [q for q in inner.find_all(exp.Select) if q is not inner]


def is_aggregate_expr(expression: exp.Expr) -> bool:
    return any(is_aggregate(n) for n in blocks.here(expression))


def _as_join(model, select, join, inner, outputs, side, fresh) -> dict:
    local = blocks.aliases(inner)
    for j in inner.args.get("joins") or []:
        on = j.args.get("on")
        if on is not None and any(blocks.is_outer(c, local) for c in blocks.columns_here(on)):
            raise UnsupportedSql(model, "LATERAL subquery correlated in a JOIN's ON clause")
    kept: list[exp.Expr] = []
    correlated: list[exp.Expr] = []
    for c in blocks.where_conjuncts(inner):
        (correlated if any(blocks.is_outer(col, local) for col in blocks.columns_here(c)) else kept).append(c)
    derived_alias = fresh("__dvm_lat")
    inner_columns: dict = {}

    def to_derived(expression: exp.Expr) -> exp.Expr:
        def swap(node):
            if isinstance(node, exp.Column) and node.table and node.table.lower() in local:
                key = (node.table.lower(), node.name.lower())
                inner_columns.setdefault(key, f"{key[0]}__{key[1]}")
                return exp.column(inner_columns[key], table=derived_alias)
            return node

        return blocks.transform_here(expression.copy(), swap)

    on_parts = [to_derived(c) for c in correlated]
    values = {c: to_derived(e) for c, e in outputs.items()}
    derived = inner.copy()
    blocks.set_where(derived, [c.copy() for c in kept])
    derived.set(
        "expressions",
        [exp.alias_(exp.column(col, table=tab), out) for (tab, col), out in inner_columns.items()]
        + [exp.alias_(exp.Literal.number(1), "__dvm_m")],
    )
    sub = exp.Subquery(this=derived, alias=exp.TableAlias(this=exp.to_identifier(derived_alias)))
    join.set("this", sub)
    join.set("on", exp.and_(*on_parts) if on_parts else (exp.true() if side == "left" else None))
    if side == "left":
        join.set("side", "LEFT")
        join.set("kind", None)
        unmatched = exp.Is(this=exp.column("__dvm_m", table=derived_alias), expression=exp.Null())
        values = {
            c: exp.Case(ifs=[exp.If(this=unmatched.copy(), true=exp.Null())], default=v) for c, v in values.items()
        }
    else:
        join.set("side", None)
        join.set("kind", None if on_parts else "CROSS")
    return values


def _swap(name: str, replacements: dict):
    def swap(node):
        if isinstance(node, exp.Column) and node.table.lower() == name:
            value = replacements.get(node.name.lower())
            if value is None:
                return node
            return exp.Paren(this=value.copy()) if not isinstance(value, (exp.Column, exp.Subquery)) else value.copy()
        return node

    return swap


def _substitute_nested(model: str, lateral: exp.Lateral, name: str, replacements: dict) -> None:
    defined = {t.alias_or_name.lower() for t in lateral.find_all(exp.Table)} | {
        s.alias_or_name.lower() for s in lateral.this.find_all(exp.Subquery) if s.alias_or_name
    }
    if name in defined:
        raise UnsupportedSql(model, f"a later LATERAL subquery defines its own {name}")
    lateral.set("this", lateral.this.transform(_swap(name, replacements)))


def _substitute(select: exp.Select, name: str, replacements: dict) -> None:
    """Replace the lateral's output columns `name.c` in this block (not in nested queries, whose
    own FROM items could reuse the alias)."""
    swap = _swap(name, replacements)

    for key, child in list(select.args.items()):
        if key in ("from_", "from", "with_", "with"):
            continue
        if isinstance(child, exp.Expression):
            select.set(key, blocks.transform_here(child, swap))
        elif isinstance(child, list):
            select.set(key, [blocks.transform_here(c, swap) if isinstance(c, exp.Expression) else c for c in child])
