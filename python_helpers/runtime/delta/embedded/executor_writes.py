"""A full refresh of the embedded engine written by Spark's executors.

Spark writes the result as parquet files into a new directory inside the stored result's table
(`full-<id>/`); the dbt process reads only their footers (schema, row counts, statistics) and
commits them with delta-rs as one overwrite, carrying the refresh metadata. No row passes
through the dbt process, so its memory does not grow with the result.

What a failure leaves: files in a directory that no commit names. A failed commit removes them
at once; a killed process leaves them for the vacuum, which removes files no version names.

Statistics: the log gets each file's row count and, for top-level integer, string and date
columns, min, max and null count from the parquet footer (the comparisons that key-restricted
reads make: delta/embedded/tables.py); other columns get none, which only means no file is
skipped on them.
"""

from __future__ import annotations

import datetime
import json
import uuid
from typing import Any, Callable, Optional

import pyarrow as pa
from deltalake.transaction import AddAction

from python_helpers.runtime import paths
from python_helpers.runtime.connections import files
from python_helpers.runtime.delta import metadata as metadata_format
from python_helpers.runtime.delta.base import ConcurrentCommit
from python_helpers.runtime.delta.embedded import storage
from python_helpers.runtime.refresh import scan_settings, steps
from python_helpers.runtime.spark_types import arrow_type

DIRECTORY_PREFIX = "full-"


def _leaves(t: pa.DataType) -> int:
    """Parquet leaf columns of an Arrow type."""
    if pa.types.is_struct(t):
        return sum(_leaves(f.type) for f in t) or 1
    if pa.types.is_map(t):
        return _leaves(t.key_type) + _leaves(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _leaves(t.value_type)
    return 1


def _stat_value(t: pa.DataType, value: Any) -> Any:
    """A footer statistic as the Delta log writes it, or None when not kept for this type."""
    if pa.types.is_integer(t) and isinstance(value, int) and not isinstance(value, bool):
        return value
    if pa.types.is_string(t) and isinstance(value, str):
        return value
    if pa.types.is_date32(t) and isinstance(value, datetime.date):
        return value.isoformat()
    return None


def stats_of(meta: Any, schema: pa.Schema) -> dict:
    """Delta statistics of one parquet file from its footer (pyarrow FileMetaData)."""
    stats: dict = {"numRecords": meta.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    leaf = 0
    for field in schema:
        width = _leaves(field.type)
        kept = width == 1 and not pa.types.is_nested(field.type)
        if kept and meta.num_row_groups:
            lows, highs, nulls = [], [], 0
            for g in range(meta.num_row_groups):
                column = meta.row_group(g).column(leaf).statistics
                if column is None or not column.has_null_count:
                    nulls = -1
                    break
                nulls += column.null_count
                if column.has_min_max:
                    lows.append(_stat_value(field.type, column.min))
                    highs.append(_stat_value(field.type, column.max))
                elif column.null_count < meta.row_group(g).num_rows:
                    lows.append(None)  # values without a min/max: no bounds for the file
            if nulls >= 0:
                stats["nullCount"][field.name] = nulls
                if lows and None not in lows and None not in highs:
                    stats["minValues"][field.name] = min(lows)
                    stats["maxValues"][field.name] = max(highs)
        leaf += width
    return stats


def _nanosecond_fields(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t):
        return t.unit == "ns"
    if pa.types.is_struct(t):
        return any(_nanosecond_fields(f.type) for f in t)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _nanosecond_fields(t.value_type)
    if pa.types.is_map(t):
        return _nanosecond_fields(t.key_type) or _nanosecond_fields(t.item_type)
    return False


def check_timestamps(schema: pa.Schema) -> None:
    """Refuse files whose timestamps Spark wrote as INT96 (the setting was not in force): they
    read back without their time zone, and committing them would change the column's type."""
    bad = [f.name for f in schema if _nanosecond_fields(f.type)]
    if bad:
        raise RuntimeError(
            f"the executors wrote timestamps as INT96 (columns {bad}), not as "
            f"{files.TIMESTAMP_TYPE}; nothing was committed -- run the refresh again"
        )


def _empty_schema(conn: Any, sql: str, names: Optional[list]) -> pa.Schema:
    """The result's schema when Spark wrote no file at all (what its analysis says)."""
    columns = conn.output_columns(sql)
    return pa.schema(
        [
            pa.field(names[i] if names is not None else c.name, arrow_type(c.type), c.nullable)
            for i, c in enumerate(columns)
        ]
    )


def check_view_fits(model: str, target: str, adds: list) -> None:
    """Where no generation directory can be made (an object store) the stream table's view names
    its files one by one: refuse before the commit a list the metastore cannot keep."""
    from python_helpers.dvm.sqlgen import render
    from python_helpers.runtime.catalog import file_queries
    from python_helpers.runtime.catalog import views as catalog_views
    from python_helpers.runtime.delta.embedded import generations

    if adds and paths.is_uri(generations.stream_root(target)):
        relation = file_queries.files_relation(target, [paths.join(target, a.path) for a in adds], {})
        catalog_views.check_view_text(model, f"of {model}", render(relation))


def add_actions(directory: str, written: list, footers: list, schema: pa.Schema) -> list:
    """Add actions for the files Spark wrote into `directory` of the table (paths relative to
    the table, statistics from their footers)."""
    return [
        AddAction(
            f"{directory}/{paths.basename(f.path)}", f.size, {}, f.modified_ms, True, json.dumps(stats_of(meta, schema))
        )
        for f, meta in zip(written, footers)
    ]


def write_full(
    conn: Any,
    target: str,
    sql: str,
    names: Optional[list],
    metadata: dict,
    read_version: Optional[int],
    phases: Callable,
) -> int:
    """Replace the stored result at `target` by the result of `sql`, written by the executors;
    returns its row count."""
    directory = f"{DIRECTORY_PREFIX}{uuid.uuid4().hex[:16]}"
    where = paths.join(target, directory)
    with phases("compute"), scan_settings.exactly(conn, files.TIMESTAMP_TYPE_KEY, files.TIMESTAMP_TYPE):
        files.write_query(conn, sql, names, where)
    steps.reached("computed")
    with phases("write"):
        try:
            written = files.parquet_files(where)
            footers = [files.footer(f) for f in written]
            schema = footers[0].schema.to_arrow_schema() if footers else _empty_schema(conn, sql, names)
            schema = pa.schema([f.remove_metadata() for f in schema])
            check_timestamps(schema)
            adds = add_actions(directory, written, footers, schema)
            check_view_fits(metadata.get("model", "?"), target, adds)
        except BaseException:
            files.remove(where)  # named by no commit
            raise
        rows = sum(meta.num_rows for meta in footers)
        try:
            counts = metadata_format.with_written(metadata, rows_written=rows, files_added=len(adds))
            storage.commit_files(target, schema, adds, counts, read_version)
        except ConcurrentCommit:
            files.remove(where)  # the rival's commit stands; these files are named by none
            raise
    return rows
