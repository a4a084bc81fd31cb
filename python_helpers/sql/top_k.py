"""Top-K: a query ending in ORDER BY ... LIMIT n [OFFSET m].

The stream table stores the query *without* its ORDER BY / LIMIT / OFFSET, maintained
differentially like any other query, and its view returns exactly the first n rows after m in
the query's order. Rows that tie on every ORDER BY key are ordered by the remaining output
columns, so the rows shown are one of the answers the query itself may give, and the same one
on every read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from sqlglot import exp

from python_helpers.errors import UnsupportedSql
from python_helpers.sql.rewrites.blocks import output_names, unaliased


@dataclass
class TopK:
    order: list  # (output position, exp.Ordered template whose `this` is replaced by the column)
    limit: Optional[int]
    offset: int

    def apply(self, base: exp.Select, names: list[str], orderable: list[bool]) -> exp.Select:
        """ORDER BY / LIMIT / OFFSET over a relation whose output columns are `names`."""
        keys = []
        for pos, template in self.order:
            ordered = template.copy()
            ordered.set("this", exp.column(names[pos], quoted=True))
            keys.append(ordered)
        taken = {pos for pos, _ in self.order}
        keys += [
            exp.Ordered(this=exp.column(n, quoted=True), nulls_first=True)
            for i, n in enumerate(names)
            if i not in taken and orderable[i]
        ]
        query = exp.Select(expressions=[exp.Star()]).from_(
            exp.Subquery(this=base, alias=exp.TableAlias(this=exp.to_identifier("__dvm_top"))), copy=False
        )
        query = query.order_by(*keys, copy=False)
        if self.limit is not None:
            query = query.limit(self.limit, copy=False)
        if self.offset:
            query = query.offset(self.offset, copy=False)
        return query


def split_top_k(model: str, query: exp.Query) -> tuple[exp.Query, Optional[TopK]]:
    """The query without its top-level ORDER BY / LIMIT / OFFSET, and the Top-K they define
    (None when there is no LIMIT or OFFSET: an ORDER BY alone does not shape a table)."""
    limit, offset = query.args.get("limit"), query.args.get("offset")
    if limit is None and offset is None:
        return query, None
    if query.args.get("order") is None:
        raise UnsupportedSql(
            model, "LIMIT / OFFSET without ORDER BY (which rows it keeps is not a function of the data)"
        )
    stripped = query.copy()
    for key in ("order", "limit", "offset"):
        stripped.set(key, None)
    names = [n.lower() for n in output_names(query)]
    first = query
    while isinstance(first, exp.SetOperation):
        first = first.this
    projections = (
        [unaliased(p).sql("spark").lower() for p in first.expressions] if isinstance(first, exp.Select) else []
    )
    order = []
    order_by = query.args.get("order")
    for ordered in order_by.expressions if order_by else []:
        order.append((_position(model, ordered.this, names, projections), ordered))
    return stripped, TopK(order, _count(model, limit, "LIMIT"), _count(model, offset, "OFFSET") or 0)


def _position(model: str, key: exp.Expr, names: list[str], projections: list[str]) -> int:
    if isinstance(key, exp.Literal) and not key.is_string:
        pos = int(key.this) - 1
        if 0 <= pos < len(names):
            return pos
    if isinstance(key, exp.Column) and not key.table and key.name.lower() in names:
        return names.index(key.name.lower())
    text = key.sql("spark").lower()
    if text in projections:
        return projections.index(text)
    raise UnsupportedSql(
        model, f"ORDER BY {key.sql('spark')[:60]} with LIMIT: order by output columns (add it to the SELECT list)"
    )


def _count(model: str, node, what: str) -> Optional[int]:
    if node is None:
        return None
    value = node.expression if isinstance(node, (exp.Limit, exp.Offset)) else node
    if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
        return int(value.this)
    raise UnsupportedSql(model, f"{what} {value.sql('spark')[:40]} (only a constant row count)")
