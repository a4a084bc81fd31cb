"""dbt's persisted docs on a stream table's view: the model's description as the view's comment,
column descriptions as its column comments.

Spark 4.1 keeps a view's comment (table property `comment`) across `ALTER VIEW ... AS`, but
rebuilds the column schema from the new query, dropping column comments; they can be set only
in a CREATE VIEW column list, and `COMMENT ON` / `ALTER COLUMN` refuse views. So the comments
live in a companion view `__dvm_docs__<name>`: no rows, the model's columns with their comments.
The published query becomes `SELECT * FROM <companion> UNION ALL SELECT * FROM (<query>)`: a
union takes its columns (comments included) from its first branch, and Spark drops the empty
branch when planning, so each refresh's atomic `ALTER VIEW ... AS` keeps the comments.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Optional

from sqlglot import exp

from python_helpers.runtime.catalog.views import ROLE_PROPERTY, quote
from python_helpers.runtime.connections.base import Connection, as_connection

DOCS_ROLE = "stream_table_docs"
DOCS_PREFIX = "__dvm_docs__"
_LOCK = threading.Lock()
_COMPANIONS: dict = {}  # (session, schema, companion) -> its text, as this process last made it


def companion_name(name: str) -> str:
    return DOCS_PREFIX + name


def _string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def column_comments(docs: Optional[dict]) -> dict:
    """{lower-case column name: comment} of the columns with a description to persist."""
    return {str(k).lower(): str(v) for k, v in ((docs or {}).get("columns") or {}).items() if v}


def with_column_docs(
    conn: Connection, schema: str, name: str, query: exp.Expression, docs: Optional[dict]
) -> exp.Expression:
    """`query` reading through the companion view when column comments are to be persisted."""
    comments = column_comments(docs)
    if not comments:
        return query
    from python_helpers.dvm.sqlgen import render

    fields = conn.output_columns(render(query))  # analysis only: the view's names and types
    text = _ensure_companion(conn, schema, name, [(f.name, f.type) for f in fields], comments)
    first = exp.select(exp.Star()).from_(exp.table_(companion_name(name), db=schema, quoted=True))
    # The alias names the companion's content, so that new comments change the view's text and
    # the view is altered (its columns take their comments when it is altered, not when read).
    tag = hashlib.md5(text.encode()).hexdigest()[:8]
    rest = exp.select(exp.Star()).from_(
        exp.Subquery(this=query, alias=exp.TableAlias(this=exp.to_identifier(f"__dvm_rows_{tag}")))
    )
    return exp.Union(this=first, expression=rest, distinct=False)


def unwrapped(view: exp.Expr) -> exp.Expr:
    """The rows' query of a view `with_column_docs` made (an upstream stream table's view, as
    parsed for inlining); any other query as it is."""
    if not isinstance(view, exp.Union) or view.args.get("distinct"):
        return view
    first, rest = view.this, view.expression
    if not (isinstance(first, exp.Select) and isinstance(rest, exp.Select)):
        return view
    companion = first.args.get("from_") or first.args.get("from")
    rows = rest.args.get("from_") or rest.args.get("from")
    if (
        companion is None
        or rows is None
        or not isinstance(companion.this, exp.Table)
        or not companion.this.name.lower().startswith(DOCS_PREFIX)
        or not isinstance(rows.this, exp.Subquery)
    ):
        return view
    return rows.this.this


def _ensure_companion(conn: Connection, schema: str, name: str, columns: list, comments: dict) -> str:
    listed = ", ".join(
        quote(c) + (f" COMMENT {_string(comments[c.lower()])}" if c.lower() in comments else "") for c, _ in columns
    )
    rows = ", ".join(f"CAST(NULL AS {t}) AS {quote(c)}" for c, t in columns)
    text = (
        f"CREATE OR REPLACE VIEW {quote(schema, companion_name(name))} ({listed}) "
        f"COMMENT {_string('column comments of the stream table ' + name)} "
        f"TBLPROPERTIES ({_string(ROLE_PROPERTY)} = {_string(DOCS_ROLE)}) AS SELECT {rows} WHERE false"
    )
    key = (conn.key, schema.lower(), name.lower())
    with _LOCK:
        if _COMPANIONS.get(key) == text:
            return text
        wanted = {c.lower(): (t, comments.get(c.lower())) for c, t in columns}
        if _described(conn, schema, companion_name(name)) == wanted:  # made by an earlier process
            _COMPANIONS[key] = text
            return text
        # Replaced only when the descriptions or the columns change (a drop and a create: a
        # reader of the stream table in that instant fails and can retry).
        conn.execute(text)
        _COMPANIONS[key] = text
        return text


def _described(conn: Connection, schema: str, name: str) -> Optional[dict]:
    """{lower-case column: (type, comment)} as the catalog describes the view; None when missing."""
    try:
        rows = conn.rows(f"DESCRIBE TABLE {quote(schema, name)}")
    except Exception:  # noqa: BLE001 - no such view
        return None
    out = {}
    for r in rows:
        if not r[0] or r[0].startswith("#"):
            break
        out[r[0].lower()] = (r[1], r[2] or None)
    return out


def columns_current(conn: Connection, schema: str, name: str, docs: Optional[dict]) -> bool:
    """Does the view already show the column comments `docs` asks for (or none are asked)?"""
    comments = column_comments(docs)
    if not comments:
        return True
    described = _described(conn, schema, name) or {}
    return bool(described) and all(described.get(c, (None, None))[1] == v for c, v in comments.items())


def set_relation_comment(conn: Connection, schema: str, name: str, comment: Optional[str]) -> None:
    """The view's comment (a table property, which `ALTER VIEW ... AS` keeps)."""
    if comment is None:
        return
    if _current_comment(conn, schema, name) == comment:
        return
    conn.execute(f"ALTER VIEW {quote(schema, name)} SET TBLPROPERTIES ('comment' = {_string(comment)})")


def _current_comment(conn: Connection, schema: str, name: str) -> Optional[str]:
    rows = conn.rows(f"DESCRIBE TABLE EXTENDED {quote(schema, name)}")
    return next((r[1] for r in rows if r[0] == "Comment"), None)


def apply(spark, schema: str, name: str, docs: Optional[dict]) -> None:
    """After a refresh: the relation comment, when the model persists it (the column comments
    were published with the view's text). `spark`: a SparkSession or a connection."""
    if docs and docs.get("relation") is not None:
        set_relation_comment(as_connection(spark), schema, name, docs["relation"])


def forget(conn: Connection) -> None:
    with _LOCK:
        for key in [k for k in _COMPANIONS if k[0] == conn.key]:
            del _COMPANIONS[key]
