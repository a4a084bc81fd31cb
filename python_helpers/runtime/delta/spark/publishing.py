"""What readers of a spark-engine stream table see: the stored Delta table registered in the
catalog as `<schema>.__dvm_stored__<model>`, the model's name a plain view over it showing the
model's columns, and each source readable by its name (a view over the Delta table at its path,
unless the name is that table already or someone else's object)."""

from __future__ import annotations

from typing import Any, Callable, Optional

from sqlglot import exp

from python_helpers.dvm.sqlgen import render
from python_helpers.runtime.catalog import comments as view_comments
from python_helpers.runtime.catalog import views as catalog_views
from python_helpers.runtime.catalog.views import Catalog, quote
from python_helpers.runtime.connections.base import Connection
from python_helpers.runtime.delta.base import Log
from python_helpers.runtime.delta.spark import sql as delta_sql
from python_helpers.runtime.refresh import steps
from python_helpers.runtime.refresh.view_inlining import STORED_PREFIX

__all__ = ["STORED_PREFIX", "publish", "up_to_date"]

# A source view's columns follow the Delta table it reads (Spark's default mode keeps the
# columns the view was made with: a column added to the source would not show by its name).
EVOLVING = "EVOLUTION"
VIEW_SCHEMA_SETTING = "spark.sql.legacy.viewSchemaBindingMode"


def publish(conn: Connection, request: Any, plan: Any, target: str, view_sql: Callable, log: Log) -> None:
    """Register the stored table, point the model's view at it, and make the sources readable."""
    schema, identifier = request.schema, request.identifier
    stored = STORED_PREFIX + identifier.lower()
    conn.execute(f"CREATE TABLE IF NOT EXISTS {quote(schema, stored)} USING delta LOCATION {delta_sql.string(target)}")
    catalog = Catalog(conn)
    # One lookup for the stored table and the model's view (publish_view uses its answer).
    catalog.remember(schema, [stored, identifier])
    if not _delta_at(conn, catalog, schema, stored, target):
        raise catalog_views.NameTaken(
            request.model,
            f"{schema}.{stored} is a catalog object that is not this stream table's stored result "
            f"(the Delta table at {target})",
            f"drop or rename {schema}.{stored}: dbt-spark-stream keeps the stream table's rows under that name",
        )
    columns = conn.output_columns(f"SELECT * FROM {quote(schema, stored)}")
    types = {c.name: c.type for c in columns}
    relation = exp.table_(stored, db=schema, quoted=True)
    query = view_comments.with_column_docs(conn, schema, identifier, view_sql(relation, types), request.docs)
    steps.reached("stream_view_altered")
    catalog.publish_view(
        schema, identifier, query, catalog_views.STREAM_TABLE, request.model, take_over=request.take_over_relation
    )
    for relation_name, src in plan.pinned.items():
        if relation_name.split(".")[-1].startswith(STORED_PREFIX):
            continue  # an upstream stream table's stored table has its own view
        _publish_source(conn, relation_name, src, request.model, log)


def up_to_date(conn: Connection, request: Any, plan: Any) -> bool:
    """The model's view, its stored table and every source's name exist, with current comments."""
    catalog = Catalog(conn)
    if not catalog.exists(request.schema, request.identifier):
        return False
    if not catalog.exists(request.schema, STORED_PREFIX + request.identifier.lower()):
        return False
    for relation in plan.pinned:
        schema, name = relation.split(".")[-2:]
        if not name.startswith(STORED_PREFIX) and not catalog.exists(schema, name):
            return False
    return view_comments.columns_current(conn, request.schema, request.identifier, request.docs)


def _publish_source(conn: Connection, relation: str, src: Any, model: str, log: Log) -> None:
    """The source readable by its name: a view over the Delta table at its path (the newest
    version, its columns following the table's), unless the name is the Delta table itself or
    someone else's object. Its text never changes: where the catalog shows this project's view
    with that text and mode, one lookup is all."""
    schema, name = relation.split(".")[-2:]
    query = exp.select(exp.Star()).from_(
        exp.Table(this=exp.to_identifier(src.path, quoted=True), db=exp.to_identifier("delta"))
    )
    catalog = Catalog(conn)
    answered, found = catalog.lookup(schema, name)
    if (
        answered
        and found is not None
        and found.role == catalog_views.SOURCE
        and found.text == render(query)
        and found.schema_mode == EVOLVING
    ):
        return  # its columns follow the table's (a column added to the source shows at once)
    kind = found.kind if found is not None else None
    if not answered or (found is not None and kind is None):  # no answer, or a name it cannot show
        kind = conn.table_type(quote(schema, name))
    if kind in catalog_views.TABLE_KINDS and _delta_at(conn, catalog, schema, name, src.path):
        return  # the catalog table is the source itself
    if answered:
        catalog.forget_view(schema, name)  # the catalog shows otherwise than this process made it
    mode = EVOLVING if _schema_clause_allowed(conn) else None
    if not catalog.publish_view(schema, name, query, catalog_views.SOURCE, model, schema_mode=mode):
        log(
            "info",
            f"{model}: {relation} is a catalog object dbt-spark-stream did not create; it is left as it is, so "
            f"other models and queries reading {relation} read that object, not the Delta table at {src.path}",
        )


def _schema_clause_allowed(conn: Connection) -> bool:
    """Does the session take a view's WITH SCHEMA clause (Spark turns it off with this setting)?
    Without it a source view keeps the columns it was made with until a full refresh alters it."""
    try:
        return str(conn.conf(VIEW_SCHEMA_SETTING, "true")).strip().lower() != "false"
    except Exception:  # noqa: BLE001 - unreadable: no clause, which every Spark takes
        return False


def _delta_at(conn: Connection, catalog: Catalog, schema: str, name: str, location: str) -> bool:
    """Is the catalog table `schema.name` the Delta table at `location`? From the catalog's
    lookup (`SHOW TABLE EXTENDED`: type, provider and location, from the metastore) where it
    shows a Delta table at that place; else from `DESCRIBE DETAIL`, which also computes the
    table's size with Spark jobs (1.2-1.5 s after each new version, in `make demo-spark`'s full
    refreshes) and tells a location written another way (a URI's host and port) for the same."""
    found = catalog.seen.get((schema.lower(), name.lower()))
    if (
        found is not None
        and found.text is None
        and found.kind in catalog_views.TABLE_KINDS
        and found.provider == "delta"
        and found.location is not None
        and _same_place(found.location, location)
    ):
        return True
    detail = _detail_of_name(conn, schema, name)
    return detail is not None and _same_place(str(detail.get("location") or ""), location)


def _detail_of_name(conn: Connection, schema: str, name: str) -> Optional[dict]:
    try:
        records = conn.records(f"DESCRIBE DETAIL {quote(schema, name)}")
    except Exception:  # noqa: BLE001 - not a Delta table
        return None
    return records[0] if records else None


def _same_place(a: str, b: str) -> bool:
    from python_helpers.runtime import paths

    return paths.normalize(a).rstrip("/") == paths.normalize(b).rstrip("/")
