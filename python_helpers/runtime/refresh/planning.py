"""Planning a refresh: everything known about the query before any data is read.

Parse, inline views, pin the Delta sources at their versions, classify user-defined functions
(runtime/refresh/functions.py) and build the operator tree, or record why the query is not
differentiable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from sqlglot import exp

from python_helpers.dvm.plan_query import query_tree
from python_helpers.dvm.tree import RECURSION_PREFIX, Node, Scan, walk
from python_helpers.errors import UnsupportedSql
from python_helpers.runtime.delta.base import DeltaEngine
from python_helpers.runtime.refresh import functions
from python_helpers.runtime.refresh.requests import RefreshRequest
from python_helpers.runtime.refresh.sources import pin_sources
from python_helpers.runtime.refresh.view_inlining import inline_views
from python_helpers.sql.parse import DIALECT, parse_query, source_relations
from python_helpers.sql.top_k import TopK


@dataclass
class Plan:
    """Everything known about the query before any data is read."""

    query: exp.Expr
    pinned: dict
    tree: Optional[Node]  # None when the query is outside the differential set
    unsupported: Optional[UnsupportedSql]
    columns: dict  # relation -> source columns read
    top_k: Optional[TopK] = None  # when the query ends in ORDER BY ... LIMIT
    definition: str = ""  # the SQL the stored result is defined by (views inlined): fingerprinted
    function_code: dict = field(default_factory=dict)  # user function -> digest of its code


def plan_request(delta: DeltaEngine, request: RefreshRequest) -> Plan:
    """Parse, inline views, pin the Delta sources and plan the tree."""
    model = request.model
    parsed = parse_query(model, request.sql)
    overrides = {k.lower(): v for k, v in (request.sources or {}).items()}
    inlined = inline_views(delta, model, parsed, overrides)
    relations = [r for r in source_relations(inlined.query) if r not in inlined.kept]
    pinned = pin_sources(
        delta, model, relations, {**overrides, **inlined.overrides}, inlined.versions, inlined.pinned_by
    )
    query, volatile, codes = functions.mark_user_functions(delta.conn, model, inlined.query)
    plan = _plan(model, query, pinned, inlined.unsupported or volatile, inlined.weights)
    plan.function_code = codes
    plan.definition = (
        request.sql if not inlined.views else f"{request.sql}\n-- views inlined:\n{inlined.query.sql(DIALECT)}"
    )
    return plan


def read_consumed_commits(delta: DeltaEngine, plan: Plan, meta: Optional[dict]) -> None:
    """For each source the last refresh read, the digest of the commit it consumed as the log
    holds it now (runtime/refresh/decide.py compares it with the recorded one: a replaced log)."""
    for relation, src in plan.pinned.items():
        old = ((meta or {}).get("offsets") or {}).get(relation)
        if old and old.get("commit") and old.get("table_id") == src.state.table_id:
            src.consumed_commit = delta.commit_digest(src.path, old["version"])


def _plan(
    model: str,
    query: exp.Expr,
    pinned: dict,
    unsupported: Optional[UnsupportedSql] = None,
    weights: Optional[dict] = None,
) -> Plan:
    schemas = {r: s.spark_types for r, s in pinned.items()}
    tree: Optional[Node] = None
    top_k: Optional[TopK] = None
    assert isinstance(query, exp.Query), "parsing and view inlining keep a query a query"
    try:
        if unsupported is None:
            tree, top_k = query_tree(model, query, schemas, weights)
    except UnsupportedSql as err:
        unsupported, top_k = err, None
    columns = {r: list(s.spark_types) for r, s in pinned.items()}
    if tree is not None:
        columns = _read_columns(tree, pinned)
    return Plan(query, pinned, tree, unsupported, columns, top_k)


def _read_columns(tree, pinned: dict) -> dict:
    """Source columns the query reads (all scans of a relation together); at least one each."""
    wanted: dict = {r: [] for r in pinned}
    for node in walk(tree):
        if isinstance(node, Scan) and not node.relation.startswith(RECURSION_PREFIX):  # not a working table
            names = {n.lower(): n for n in pinned[node.relation].spark_types}
            for c in node.source_columns + [node.weight_column]:
                if c is not None and names[c.lower()] not in wanted[node.relation]:
                    wanted[node.relation].append(names[c.lower()])
    for r, cols in wanted.items():
        if not cols:
            cols.append(next(iter(pinned[r].spark_types)))
    # Scans name columns as the query wrote them; serve them under those (lower-case) names.
    return wanted
