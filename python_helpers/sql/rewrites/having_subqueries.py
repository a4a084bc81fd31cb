"""Pass 3: a HAVING clause that holds a scalar subquery becomes the WHERE of a block around
the grouped one, so that the scalar-subquery pass can hoist the subquery like any WHERE subquery:

    SELECT k, sum(x) AS s FROM t GROUP BY k HAVING sum(x) > (SELECT ...)
 => SELECT __dvm_hN.__dvm_o0 AS k, __dvm_hN.__dvm_o1 AS s
    FROM (SELECT k AS __dvm_o0, sum(x) AS __dvm_o1, sum(x) AS __dvm_h0 FROM t GROUP BY k) __dvm_hN
    WHERE __dvm_hN.__dvm_h0 > (SELECT ...)

Equivalent: HAVING filters the grouped rows, which is what the outer WHERE does with each
aggregate (and grouping column) of the HAVING clause computed as an extra column. DISTINCT
moves out with it (it applies after HAVING). Only uncorrelated subqueries are taken here.
"""

from __future__ import annotations

from sqlglot import exp

from python_helpers.errors import UnsupportedSql
from python_helpers.sql.aggregates import is_aggregate
from python_helpers.sql.rewrites import blocks
from python_helpers.sql.rewrites.scalar_subqueries import scalar_subqueries


def rewrite(model: str, query: exp.Expr, fresh: blocks.FreshNames) -> exp.Expr:
    for select in blocks.selects_bottom_up(query):
        having = select.args.get("having")
        if having is None or not scalar_subqueries(having.this):
            continue
        for sq in scalar_subqueries(having.this):
            if blocks.references_outside(sq.this):
                raise UnsupportedSql(model, "correlated scalar subquery in HAVING")
        if any(isinstance(n, exp.Window) for p in select.expressions for n in blocks.here(p)):
            raise UnsupportedSql(model, "window functions with a subquery in HAVING (windows apply after HAVING)")
        query = blocks.replace_block(query, select, _wrap(select, fresh))
    return query


def _wrap(select: exp.Select, fresh: blocks.FreshNames) -> exp.Select:
    alias = fresh("__dvm_h")
    inner = select.copy()
    for key in ("having", "distinct", "order", "with_", "with"):
        inner.set(key, None)
    names = [p.alias_or_name for p in select.expressions]
    inner.set(
        "expressions", [exp.alias_(blocks.unaliased(p).copy(), f"__dvm_o{i}") for i, p in enumerate(select.expressions)]
    )
    extra: list = []

    def lift(node):
        # Aggregates and bare (grouping) columns of the HAVING clause become inner columns.
        if isinstance(node, (exp.Select, exp.Subquery)):
            return node
        if is_aggregate(node) or (isinstance(node, exp.Column) and node.table):
            name = f"__dvm_h{len(extra)}"
            extra.append(exp.alias_(node.copy(), name))
            return exp.column(name, table=alias)
        return node

    predicate = blocks.transform_here(select.args["having"].this.copy(), lift)
    inner.set("expressions", inner.expressions + extra)
    outer = exp.Select(
        expressions=[exp.alias_(exp.column(f"__dvm_o{i}", table=alias), n, quoted=None) for i, n in enumerate(names)]
    )
    outer = outer.from_(exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(alias))), copy=False)
    outer.set("where", exp.Where(this=predicate))
    for key in ("distinct", "order", "with_", "with"):
        if select.args.get(key) is not None:
            outer.set(key, select.args[key].copy())
    return outer
