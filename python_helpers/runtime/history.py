"""The refresh history of a schema's stream tables, as a table users can query.

Each refresh records itself in its own commit (runtime/refresh/costs.py: mode, reason, change
rows, phase times, start, files and bytes read; the offsets it consumed; the rows and files it
wrote, in the writer's operation metrics or its own metadata), so the history is the stored
results' Delta logs: as long-lived as they are (Delta's log retention), and never a write that
could fail a refresh. `dbt run-operation stream_table_refresh_history` reads those logs and replaces the rows
of `<schema>.stream_table_refresh_history`, a parquet table any Spark reads, one row per refresh
commit. A refresh that failed committed nothing: the adapter adds its row to the table when
it fails (mode `failed`, the error as the reason), and rewriting the table keeps those rows.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Optional

import pyarrow as pa

from python_helpers.runtime.catalog.views import ROLE_PROPERTY, Catalog, NameTaken, quote
from python_helpers.runtime.connections.base import Connection, as_connection
from python_helpers.runtime.delta import metadata as metadata_format
from python_helpers.runtime.delta.choose import delta_engine
from python_helpers.runtime.refresh import costs
from python_helpers.runtime.spark_types import spark_type_strings

TABLE = "stream_table_refresh_history"
ROLE = "refresh_history"
FAILED = "failed"  # the mode of a failed refresh's row
FAILED_KEEP_DAYS = 30  # as long as Delta keeps a log by default (the successful refreshes' rows)

SCHEMA = pa.schema(
    [
        pa.field("schema_name", pa.string()),
        pa.field("stream_table", pa.string()),
        pa.field("model", pa.string()),
        pa.field("storage_version", pa.int64()),
        pa.field("started_at", pa.timestamp("us", tz="UTC")),
        pa.field("committed_at", pa.timestamp("us", tz="UTC")),
        pa.field("seconds", pa.float64()),  # from the refresh's start to its commit
        pa.field("mode", pa.string()),  # full | differential | failed
        pa.field("reason", pa.string()),  # why full (none for a differential refresh); a failure's error
        pa.field("rule", pa.string()),  # which of auto's rules sent it to full (runtime/refresh/auto.py)
        pa.field("read_ratio_pct", pa.int64()),  # the read estimate against a rebuild's bytes, in percent
        pa.field("read_bar_pct", pa.int64()),  # the bar that estimate was over, when it sent it to full
        pa.field("change_rows", pa.int64()),  # counted from the sources' Delta logs
        # What the commit did to the stored rows and files (metadata.commit_counts): from the
        # writer's operation metrics, or from the counts a commit of the dbt process carries.
        *[pa.field(count, pa.int64()) for count in metadata_format.COUNTS],
        # The join inputs' data files read and ruled out by statistics (0 under the spark
        # engine, where Delta skips files itself), and the bytes the delta query read as the read
        # estimate counts them (the embedded engine's); differential refreshes only (costs.entry).
        pa.field("files_read", pa.int64()),
        pa.field("files_skipped", pa.int64()),
        pa.field("read_bytes", pa.int64()),
        # Statements the refresh had Spark analyse before its write (connections/trace.py).
        pa.field("spark_statements", pa.int64()),
        pa.field("source_versions_from", pa.string()),  # JSON {source: version}
        pa.field("source_versions_to", pa.string()),
        pa.field("phases", pa.string()),  # JSON {phase: seconds} before the commit
        pa.field("dbt_invocation_id", pa.string()),  # the dbt run's invocation_id (run_results.json)
    ]
)


def _at(ms: Optional[int]) -> Optional[dt.datetime]:
    return None if ms is None else dt.datetime.fromtimestamp(int(ms) / 1000, dt.timezone.utc)


def refresh_rows(schema: str, name: str, commits: list) -> list:
    """One row per refresh commit (oldest first) of the stream table `name`."""
    rows = []
    previous: dict = {}
    for meta in commits:
        entry = (meta.get("history") or [{}])[-1]  # a commit's newest entry is its own refresh's
        own = costs.completed({"history": [entry], "committed_at_ms": meta.get("committed_at_ms")})[-1]
        to = {r: int(o["version"]) for r, o in sorted((meta.get("offsets") or {}).items())}
        rows.append(
            {
                "schema_name": schema,
                "stream_table": name,
                "model": meta.get("model"),
                "storage_version": meta.get("storage_version"),
                "started_at": _at(own.get("started_ms")),
                "committed_at": _at(meta.get("committed_at_ms")),
                "seconds": own.get("seconds"),
                "mode": meta.get("mode"),
                "reason": own.get("reason"),
                "rule": own.get("rule"),
                "read_ratio_pct": own.get("read_ratio_pct"),
                "read_bar_pct": own.get("read_bar_pct"),
                "change_rows": own.get("change_rows"),
                **{count: (meta.get(metadata_format.WRITTEN) or {}).get(count) for count in metadata_format.COUNTS},
                "files_read": own.get("files_read"),
                "files_skipped": own.get("files_skipped"),
                "read_bytes": own.get("read_bytes"),
                "spark_statements": own.get("spark_statements"),
                "source_versions_from": json.dumps({r: previous.get(r) for r in to}) if previous else None,
                "source_versions_to": json.dumps(to),
                "phases": json.dumps(own["phases"]) if own.get("phases") else None,
                "dbt_invocation_id": own.get("invocation_id"),
            }
        )
        previous = to
    return rows


def schema_history(conn: Connection, schema: str, engine: str = "auto") -> list:
    """Every refresh row of every stream table of `schema`."""
    delta = delta_engine(conn, engine, f"stream_table_refresh_history({schema})")
    rows: list = []
    for name in delta.stream_tables(schema):
        rows.extend(refresh_rows(schema, name, delta.refresh_commits(delta.stored_location(schema, name))))
    return rows


def _table(conn: Connection, schema: str, what: str) -> bool:
    """Make sure `<schema>.stream_table_refresh_history` is ours with today's columns; False
    when it did not exist (made again with today's columns, it keeps its failed refreshes'
    rows: True)."""
    catalog = Catalog(conn)
    exists, role = catalog.role(schema, TABLE)
    if exists and role != ROLE:
        raise NameTaken(
            what,
            f"{schema}.{TABLE} is a catalog object dbt-spark-stream did not create",
            f"drop or rename {schema}.{TABLE}: the refresh history is written under that name",
        )
    failed = None
    if exists:
        names = [c.name for c in conn.output_columns(f"SELECT * FROM {quote(schema, TABLE)}")]
        if names != SCHEMA.names:
            # Ours, written by an older version with other columns: made again with today's.
            # Its rows are derived from the logs, but for the failed refreshes': kept.
            kept = [n for n in names if n in SCHEMA.names]
            failed = _failed_rows(conn, schema, kept) if {"mode", "started_at"} <= set(kept) else []
            conn.execute(f"DROP TABLE {quote(schema, TABLE)}")
    if not exists or failed is not None:
        columns = ", ".join(f"{quote(name)} {type_}" for name, type_ in spark_type_strings(SCHEMA).items())
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {quote(schema, TABLE)} ({columns}) USING parquet "
            f"TBLPROPERTIES ('{ROLE_PROPERTY}' = '{ROLE}')"
        )
    if failed:
        _write(conn, schema, failed, "INTO")
    return exists


def _failed_rows(conn: Connection, schema: str, columns: Optional[list] = None) -> list:
    """The failed refreshes' rows of the last FAILED_KEEP_DAYS days in the table, in today's
    columns (`columns`: those the table has, when it was written with others; NULL for the rest)."""
    picked = ", ".join(quote(c) for c in columns) if columns is not None else "*"
    found = conn.arrow(
        f"SELECT {picked} FROM {quote(schema, TABLE)} WHERE mode = '{FAILED}' "
        f"AND started_at >= current_timestamp() - INTERVAL {FAILED_KEEP_DAYS} DAYS"
    )
    return pa.Table.from_pylist(found.to_pylist(), schema=SCHEMA).to_pylist()  # (absent columns: NULL)


def _write(conn: Connection, schema: str, rows: list, how: str) -> None:
    view = f"__dvm_history_{uuid.uuid4().hex[:12]}"
    conn.view_of_arrow(view, pa.Table.from_pylist(rows, schema=SCHEMA), one_partition=True)
    try:
        names = ", ".join(quote(f.name) for f in SCHEMA)
        conn.execute(f"INSERT {how} TABLE {quote(schema, TABLE)} SELECT {names} FROM {view}")
    finally:
        conn.drop_view(view)


def write_history(spark, schema: str, engine: str = "auto") -> list:
    """Replace the rows of `<schema>.stream_table_refresh_history` by the history in the logs
    plus the failed refreshes it holds (of the last FAILED_KEEP_DAYS days), and return them.
    `spark`: a SparkSession or a connection."""
    conn = as_connection(spark)
    rows = schema_history(conn, schema, engine)
    if _table(conn, schema, f"stream_table_refresh_history({schema})"):
        rows.extend(_failed_rows(conn, schema))
    _write(conn, schema, rows, "OVERWRITE")
    return rows


def record_failure(spark, request, error: str, started_ms: int) -> None:
    """Add a failed refresh's row to `<schema>.stream_table_refresh_history` (a failed refresh
    commits nothing, so its log has no trace of it). The caller ignores any error of this: a
    history that cannot be written never changes how the refresh ended."""
    conn = as_connection(spark)
    _table(conn, request.schema, f"stream table '{request.model}'")
    started = _at(started_ms)
    ended = dt.datetime.now(dt.timezone.utc)
    row: dict = {name: None for name in SCHEMA.names}
    row.update(
        {
            "schema_name": request.schema,
            "stream_table": request.identifier,
            "model": request.model,
            "started_at": started,
            "seconds": round((ended - started).total_seconds(), 3) if started is not None else None,
            "mode": FAILED,
            "reason": error[:1000],
            "dbt_invocation_id": getattr(request, "invocation_id", None),
        }
    )
    _write(conn, request.schema, [row], "INTO")


def format_summary(rows: list, schema: str) -> str:
    """Per stream table: refreshes, how many ran in full, the median and slowest length."""
    if not rows:
        return f"no refresh history in schema {schema}"
    by: dict = {}
    for r in rows:
        by.setdefault(r["stream_table"], []).append(r)
    lines = [f"{schema}.{TABLE}: {len(rows)} refreshes of {len(by)} stream tables"]
    for name, rs in sorted(by.items()):
        failed = sum(1 for r in rs if r["mode"] == FAILED)
        rs = [r for r in rs if r["mode"] != FAILED]
        full = sum(1 for r in rs if r["mode"] == "full")
        median = costs.median_seconds(rs)
        slowest = max((r["seconds"] for r in rs if r["seconds"] is not None), default=None)
        lines.append(
            f"  {name}: {len(rs)} refreshes, {full} full"
            + (f", {failed} failed" if failed else "")
            + (
                f", median {median:.1f} s, slowest {slowest:.1f} s"
                if median is not None and slowest is not None
                else ""
            )
        )
    return "\n".join(lines)
