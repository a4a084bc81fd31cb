"""View inlining: a stream table that reads a Spark view (a dbt `view` model, say) is maintained
over the view's base Delta tables.

Each table reference that is not a Delta source but a view in the catalog is replaced by the
view's query as a derived table under the same alias (views over views too). Unqualified table
names inside the view are resolved in the namespace the view was created in, as Spark does.
The inlined text is part of the stream table's fingerprint, so redefining the view rebuilds it.

A stream table's view is inlined over its stored Delta table, which has a change feed like any
source (stream tables over stream tables): the view's filter on the HAVING flag and its renaming
are linear, and a bag result's repetition of each stored row `__dvm_count` times becomes the
scan's multiplicity (`weights`: a change row weighs its weight times that count). The upstream
is read at its newest version, and every source the upstream also reads is pinned at the
version the upstream was refreshed to (`versions`), so both sides see the same state. A Top-K
stream table is not a linear function of its stored rows and is not inlined (full refresh).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import sqlglot
from sqlglot import exp

from python_helpers.errors import UnsupportedSql
from python_helpers.runtime.delta.base import DeltaEngine
from python_helpers.sql.parse import DIALECT, relation_name, source_relations

MAX_DEPTH = 10
STORED_PREFIX = "__dvm_stored__"  # relation name of an upstream stream table's stored table
COUNT_COLUMN = "__dvm_count"


@dataclass
class Inlined:
    query: exp.Expr
    views: list = field(default_factory=list)  # relations inlined
    kept: set = field(default_factory=set)  # views left as they are (read by name in a full refresh)
    unsupported: Optional[UnsupportedSql] = None
    overrides: dict = field(default_factory=dict)  # relation -> path of upstream stored tables
    weights: dict = field(default_factory=dict)  # relation -> multiplicity column (bag upstreams)
    versions: dict = field(default_factory=dict)  # relation -> version to pin (an upstream's offsets)
    pinned_by: dict = field(default_factory=dict)  # relation -> the upstream stream table pinning it


def inline_views(delta: DeltaEngine, model: str, query: exp.Expr, overrides: dict) -> Inlined:
    out = Inlined(query)
    try:
        out.query = _inline(delta, model, query, overrides, out, depth=0)
    except UnsupportedSql as err:
        # Nothing inlined: every view is read by name by a full refresh, and only the Delta
        # sources are pinned.
        out.query, out.views, out.unsupported = query, [], err
        out.overrides, out.weights, out.versions, out.pinned_by = {}, {}, {}, {}
        out.kept = {
            r
            for r in source_relations(query)
            if r not in overrides
            and len(r.split(".")) > 1
            and not _is_delta(delta, r, overrides)
            and _view(delta, r) is not None
        }
    return out


def _inline(delta: DeltaEngine, model: str, query: exp.Expr, overrides: dict, out: Inlined, depth: int) -> exp.Expr:
    ctes = {c.alias_or_name.lower() for c in query.find_all(exp.CTE)}

    def swap(node):
        if not isinstance(node, exp.Table) or not node.name or (not node.db and node.name.lower() in ctes):
            return node
        relation = relation_name(node)
        if relation in overrides or len(relation.split(".")) < 2 or _is_delta(delta, relation, overrides):
            return node
        view = _view(delta, relation)
        if view is None:
            return node  # not a view either: pinning reports the missing source
        text, namespace, names = view
        if depth >= MAX_DEPTH:
            raise UnsupportedSql(model, f"views nested more than {MAX_DEPTH} deep ({relation})")
        try:
            inner = sqlglot.parse_one(text, read=DIALECT)
        except sqlglot.errors.ParseError:
            out.kept.add(relation)
            raise UnsupportedSql(model, f"the text of view {relation} does not parse as Spark SQL") from None
        if _is_stream_table(delta, relation):
            inner = _upstream(delta, model, relation, inner, out)
        else:
            _qualify_tables(inner, namespace)
            inner = _inline(delta, model, inner, overrides, out, depth + 1)
        inner = _renamed(inner, names)
        out.views.append(relation)
        return exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(node.alias_or_name)))

    return query.copy().transform(swap)


def _upstream(delta: DeltaEngine, model: str, relation: str, view: exp.Expr, out: Inlined) -> exp.Expr:
    """The view of an upstream stream table, reading its stored table as a source."""
    from python_helpers.runtime.catalog.comments import unwrapped

    view = unwrapped(view)  # column comments of persist_docs: the rows are the union's second branch
    schema, name = relation.split(".")[-2:]
    path = delta.stored_location(schema, name)
    meta = delta.read_metadata(path)
    if meta is None or not isinstance(view, exp.Select) or view.args.get("limit") is not None:
        out.kept.add(relation)
        raise UnsupportedSql(
            model,
            f"reads the stream table {relation}, whose rows are not a linear function of "
            "its stored table (Top-K, or not built yet)",
        )
    stored = f"{schema}.{STORED_PREFIX}{name}".lower()
    out.overrides[stored] = path
    for lateral in list(view.args.get("laterals") or []):
        lateral.pop()  # LATERAL VIEW explode(sequence(1, __dvm_count)): the scan's multiplicity
        out.weights[stored] = COUNT_COLUMN
    from_ = view.args.get("from_") or view.args.get("from")
    assert from_ is not None, "the view of a stream table always reads its stored table"
    from_.set(
        "this",
        exp.Table(
            this=exp.to_identifier(f"{STORED_PREFIX}{name}".lower()),
            db=exp.to_identifier(schema.lower()),
            alias=exp.TableAlias(this=exp.to_identifier("__dvm_stored")),
        ),
    )
    for upstream_source, offset in (meta.get("offsets") or {}).items():
        out.versions[upstream_source] = offset["version"]
        out.pinned_by[upstream_source] = relation
    return view


def _is_stream_table(delta: DeltaEngine, relation: str) -> bool:
    # Not from the view text: a stream table's view names its stored files, or none when empty.
    schema, name = relation.split(".")[-2:]
    return delta.is_delta(delta.stored_location(schema, name))


def is_stored_table(relation: str) -> bool:
    return relation.split(".")[-1].startswith(STORED_PREFIX)


def _is_delta(delta: DeltaEngine, relation: str, overrides: dict) -> bool:
    return delta.is_delta(delta.source_location(relation, overrides))


def _view(delta: DeltaEngine, relation: str):
    """(view text, namespace, column names) when `relation` is a persistent view, else None.
    One catalog statement: its `Type` row tells a view from a table; a missing relation fails it."""
    try:
        rows = delta.conn.rows(f"DESCRIBE TABLE EXTENDED {'.'.join(f'`{p}`' for p in relation.split('.'))}")
    except Exception:  # noqa: BLE001 - not resolvable: treat as not a view
        return None
    names, info, in_columns = [], {}, True
    for col_name, data_type, *_ in rows:
        if in_columns:
            if not col_name:
                in_columns = False
            elif not col_name.startswith("#"):
                names.append(col_name)
            continue
        info[col_name] = data_type
    text = info.get("View Text")
    if (info.get("Type") or "").upper() != "VIEW" or not text:
        return None
    namespace = (info.get("View Catalog and Namespace") or "").split(".")[-1] or "default"
    return text, namespace, names


def _qualify_tables(query: exp.Expr, namespace: str) -> None:
    ctes = {c.alias_or_name.lower() for c in query.find_all(exp.CTE)}
    for table in query.find_all(exp.Table):
        if table.name and not table.db and table.name.lower() not in ctes:
            table.set("db", exp.to_identifier(namespace))


def _renamed(query: exp.Expr, names: list) -> exp.Expr:
    """The view's own column names, when it declared a column list that differs from its query's."""
    select = query
    while isinstance(select, exp.SetOperation):
        select = select.this
    if not isinstance(select, exp.Select) or any(isinstance(p, exp.Star) for p in select.expressions):
        return query
    outputs = [p.alias_or_name for p in select.expressions]
    if not names or [o.lower() for o in outputs] == [n.lower() for n in names] or len(outputs) != len(names):
        return query
    return exp.Select(
        expressions=[
            exp.alias_(exp.column(o, table="__dvm_view", quoted=True), n, quoted=True) for o, n in zip(outputs, names)
        ]
    ).from_(exp.Subquery(this=query, alias=exp.TableAlias(this=exp.to_identifier("__dvm_view"))), copy=False)
