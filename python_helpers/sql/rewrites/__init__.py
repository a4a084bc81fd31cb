"""The rewrite pipeline: qualified query in, an equivalent query the tree builder handles out.

Passes run in this order, each over every SELECT block (inner blocks first), one module each:

1. lateral_joins      -- LATERAL generator in FROM: a LATERAL VIEW; LATERAL subquery: its
                         expressions, scalar subqueries (one-row aggregate) or a join
2. grouping_sets      -- GROUPING SETS / ROLLUP / CUBE: a UNION ALL of plain GROUP BY branches
3. having_subqueries  -- HAVING with a scalar subquery: move the HAVING into an outer WHERE
4. exists_values      -- EXISTS used as a value (SELECT list, CASE): a COUNT(*) subquery > 0
5. scalar_subqueries  -- scalar subqueries in WHERE and SELECT (grouped blocks too): hoist to a
                         join with a (grouped) derived table
6. sublinks_in_or     -- EXISTS / IN inside OR or NOT: disjoint UNION ALL branches (to a fixed point)
7. semi_anti_joins    -- EXISTS / NOT EXISTS / IN / NOT IN in WHERE: semi and anti joins (before
                         the scalar subqueries' joins they do not read)
8. distinct_aggregates -- COUNT / SUM / AVG (DISTINCT x): the same aggregate over the distinct
                         (group, x) pairs of an inner GROUP BY

What no pass removed (NOT IN or a correlated IN used as a value, a subquery in a JOIN's ON
clause or GROUP BY) is rejected at the end with the place named. docs/supported-sql.md states
each pattern and why the rewrite is equivalent.
"""

from __future__ import annotations

from sqlglot import exp

from python_helpers.errors import UnsupportedSql
from python_helpers.sql.rewrites import (
    blocks,
    distinct_aggregates,
    exists_values,
    grouping_sets,
    having_subqueries,
    lateral_joins,
    scalar_subqueries,
    semi_anti_joins,
    sublinks_in_or,
)

PASSES = (
    lateral_joins,
    grouping_sets,
    having_subqueries,
    exists_values,
    scalar_subqueries,
    sublinks_in_or,
    semi_anti_joins,
    distinct_aggregates,
)


def rewrite(model: str, query: exp.Expr) -> exp.Expr:
    fresh = blocks.FreshNames()
    query = query.copy()
    for rewrite_pass in PASSES:
        query = rewrite_pass.rewrite(model, query, fresh)
    _check_no_sublinks(model, query)
    return query


def _check_no_sublinks(model: str, query: exp.Expr) -> None:
    for node in query.walk():
        if blocks.is_sublink(node):
            raise UnsupportedSql(
                model,
                f"{'EXISTS' if isinstance(node, exp.Exists) else 'IN (subquery)'} "
                "outside a top-level AND / OR / NOT of a WHERE clause, "
                "and not a plain EXISTS or uncorrelated IN used as a value",
            )
        if isinstance(node, exp.Subquery) and not isinstance(node.parent, (exp.From, exp.Join, exp.SetOperation)):
            place = _place(node)
            raise UnsupportedSql(
                model, f"scalar subquery {place} (rewritten into joins only in WHERE, HAVING and the SELECT list)"
            )


def _place(node: exp.Expr) -> str:
    while node.parent is not None:
        parent = node.parent
        if isinstance(parent, exp.Select):
            for key in ("expressions", "group", "order", "joins"):
                value = parent.args.get(key)
                if value is node or (isinstance(value, list) and node in value):
                    return {
                        "expressions": "in the SELECT list",
                        "group": "in GROUP BY",
                        "order": "in ORDER BY",
                        "joins": "in a JOIN's ON clause",
                    }[key]
            return "in this position"
        node = parent
    return "in this position"
