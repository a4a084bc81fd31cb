"""A source's change data feed between two versions, as weighted rows for Spark.

The change is counted before it is read (the Delta log's statistics: `runtime/delta/embedded/log.py`), so the
decision to refresh in full is taken without reading a large change at all. Then:

* a small change (the usual case) is read in the driver with pyarrow, consolidated there (rows
  whose weights cancel disappear, so a source whose changes all cancel counts as unchanged) and
  handed to Spark as a local relation: no Spark job spent on it;
* a larger one is read by Spark itself from the change files (never through the driver) and
  consolidated in the delta SQL.

Weights: inserts and update post-images +1, deletes and pre-images -1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from python_helpers.dvm.sqlgen import render, sub
from python_helpers.dvm.tree import WEIGHT
from python_helpers.runtime import paths
from python_helpers.runtime.connections.base import Connection
from python_helpers.runtime.delta.embedded import log as delta_log
from python_helpers.runtime.delta.embedded.tables import consolidate_arrow
from python_helpers.runtime.spark_types import normalize_schema, spark_type_strings

CHANGE_TYPE = "_change_type"
WEIGHT_OF_CHANGE = {"insert": 1, "delete": -1, "update_preimage": -1, "update_postimage": 1}
# Up to this many change rows (counted or estimated from the log) a source's change is read in
# the driver; above, Spark reads the change files.
DRIVER_READ_MAX_ROWS = 50_000


@dataclass
class Changes:
    columns: list  # of the view bound: the read columns and the weight
    rows: int  # exact when `consolidated`, else the log's estimate
    consolidated: bool  # rows with equal values were summed and cancelled ones dropped
    arrow: Optional[pa.Table] = None  # the rows, when they were read in the driver
    file_views: list = field(default_factory=list)  # views over the change files the view reads
    rows_view: Optional[str] = None  # the same rows as they are, for questions answered without a job


def table_stats(table) -> tuple[Optional[int], float]:
    """(rows of the snapshot from the log's statistics or None, bytes per row)."""
    from python_helpers.runtime.delta.embedded.tables import add_actions

    actions = add_actions(table)
    size = int(pc.sum(actions.column("size_bytes")).as_py() or 0) if "size_bytes" in actions.column_names else 0
    if "num_records" not in actions.column_names or actions.column("num_records").null_count:
        return None, 100.0
    rows = int(pc.sum(actions.column("num_records")).as_py() or 0)
    return rows, (size / rows if rows else 100.0)


def exact_rows(files: list) -> Optional[int]:
    """Rows of the change files: the log's counts, parquet footers for the rest (local files);
    None when a remote file has no count in the log."""
    import pyarrow.parquet as pq

    total = 0
    for f in files:
        if f.records is not None:
            total += f.records
        elif paths.is_uri(f.path):
            return None
        else:
            total += pq.ParquetFile(f.path).metadata.num_rows
    return total


def missing_files(files: list) -> list:
    """Change files that can no longer be read (vacuumed); only local files are checked."""
    return [f.path for f in files if not paths.is_uri(f.path) and not os.path.exists(f.path)]


def read_changes(
    conn: Connection,
    name: str,
    arrow_schema: pa.Schema,
    partition_columns: list,
    table_path: str,
    files: list,
    columns: list,
    rows: int,
    one_partition_up_to: int = 0,
    rows_name: Optional[str] = None,
) -> Changes:
    """Bind the temporary view `name` to the change rows of `files` restricted to `columns`,
    with weights (in one partition when there are at most `one_partition_up_to` rows); rows read
    in the driver also under `rows_name` as they are, where the connection folds filters over
    them (Connection.folds_local_rows; Changes.rows_view says whether)."""
    bound = list(columns) + [WEIGHT]
    if rows <= DRIVER_READ_MAX_ROWS:
        data = _read_in_driver(arrow_schema, files, columns)
        merged = consolidate_arrow(data)
        if merged is not None:
            data = merged
        local = rows_name if rows_name is not None and conn.folds_local_rows else None
        conn.view_of_arrow(name, data, one_partition=data.num_rows <= one_partition_up_to, rows_name=local)
        return Changes(bound, data.num_rows, merged is not None, data, rows_view=local)
    file_views: list = []
    query = _read_in_spark(conn, name, arrow_schema, partition_columns, table_path, files, columns, file_views)
    conn.view_of_query(name, render(query), one_partition=rows <= one_partition_up_to)
    return Changes(bound, rows, False, file_views=file_views)


def _target_schema(arrow_schema: pa.Schema, columns: list) -> pa.Schema:
    return pa.schema([arrow_schema.field(c) for c in columns] + [pa.field(WEIGHT, pa.int64(), False)])


def _read_in_driver(arrow_schema: pa.Schema, files: list, columns: list) -> pa.Table:
    import pyarrow.parquet as pq

    target = _target_schema(arrow_schema, columns)
    parts = []
    for f in files:
        wanted = list(columns) + ([CHANGE_TYPE] if f.kind == "cdc" else [])
        if paths.is_uri(f.path):
            import pyarrow.fs as pafs

            fs, inner = pafs.FileSystem.from_uri(paths.for_delta_rs(f.path))
            handle = pq.ParquetFile(fs.open_input_file(inner))
        else:
            handle = pq.ParquetFile(f.path)
        present = set(handle.schema_arrow.names)
        data = handle.read(columns=[c for c in wanted if c in present])
        data = data.cast(normalize_schema(data.schema))
        n = data.num_rows
        partition = dict(f.partition_values)
        arrays = []
        for c in columns:
            type_ = arrow_schema.field(c).type
            if c in present:
                arrays.append(data.column(c).cast(type_))
            elif c in partition:
                arrays.append(delta_log.typed_partition_value(partition[c], type_, n))
            else:
                arrays.append(pa.nulls(n, type_))
        if f.kind == "cdc":
            kinds = data.column(CHANGE_TYPE).to_pylist()
            weights = pa.array([WEIGHT_OF_CHANGE.get(k, 0) for k in kinds], pa.int64())
        else:
            weights = pa.array([1 if f.kind == "add" else -1] * n, pa.int64())
        arrays.append(weights)
        parts.append(pa.Table.from_arrays(arrays, schema=target))
    if not parts:
        return target.empty_table()
    data = pa.concat_tables(parts)
    return data.filter(pc.not_equal(data.column(WEIGHT), 0))


def _hive_layout(table_root: str, files: list, partition_columns: list) -> bool:
    """Every file sits in the `col=value/...` directories of its partition values (so Spark's
    partition discovery from a base path gives the same values)."""
    from urllib.parse import unquote

    for f in files:
        rel = paths.relative(f.path, table_root).split("/")[:-1]
        if rel and rel[0] == "_change_data":
            rel = rel[1:]
        parsed = dict(part.split("=", 1) for part in rel if "=" in part)
        values = dict(f.partition_values)
        for c in partition_columns:
            raw = parsed.get(c)
            if raw is None:
                return False
            value = None if raw == "__HIVE_DEFAULT_PARTITION__" else unquote(raw)
            if value != values.get(c):
                return False
    return True


def _read_in_spark(
    conn: Connection,
    name: str,
    arrow_schema: pa.Schema,
    partition_columns: list,
    table_root: str,
    files: list,
    columns: list,
    file_views: list,
) -> exp.Query:
    """Spark reads the change files itself (nothing passes through the driver): a view per
    kind of file (and per partition when the files do not sit in hive-style directories), and
    the query that gives their rows weights."""
    parts: list[exp.Query] = []
    hive = not partition_columns or _hive_layout(table_root, files, partition_columns)
    types = spark_type_strings(arrow_schema)
    for kind in ("cdc", "add", "remove"):
        group = [f for f in files if f.kind == kind]
        if not group:
            continue
        if hive:
            batches: list = [(None, group)]
        else:  # partition values as literals, one read per partition
            by_value: dict = {}
            for f in group:
                by_value.setdefault(f.partition_values, []).append(f)
            batches = list(by_value.items())
        for values, batch in batches:
            fields = [fl for fl in arrow_schema if hive or fl.name not in partition_columns]
            if kind == "cdc":
                fields.append(pa.field(CHANGE_TYPE, pa.string()))
            base = None
            if hive and partition_columns:
                root = table_root if kind != "cdc" else paths.join(table_root, "_change_data")
                base = paths.for_spark(root, table_root)
            view = f"{name}_{kind}{len(parts)}"
            file_views.append(view)
            conn.view_of_files(
                view, [paths.spark_glob_path(f.path, table_root) for f in batch], pa.schema(fields), base
            )
            literals = dict(values) if values is not None else {}
            selected: list[exp.Expr] = []
            for c in columns:
                if c in literals:
                    value = literals[c]
                    literal = exp.Null() if value is None else exp.Literal.string(value)
                    selected.append(exp.alias_(exp.Cast(this=literal, to=exp.DataType.build(types[c])), c, quoted=True))
                else:
                    selected.append(exp.column(c, quoted=True))
            selected.append(exp.alias_(exp.Cast(this=_weight_of(kind), to=exp.DataType.build("bigint")), WEIGHT))
            parts.append(exp.select(*selected).from_(exp.to_table(view)))
    if not parts:
        empty = [
            exp.alias_(exp.Cast(this=exp.Null(), to=exp.DataType.build(types[c])), c, quoted=True) for c in columns
        ]
        return exp.select(*empty, exp.alias_(exp.Cast(this=exp.Null(), to=exp.DataType.build("bigint")), WEIGHT)).where(
            exp.false()
        )
    union = parts[0]
    for part in parts[1:]:
        union = exp.union(union, part, distinct=False)
    return (
        exp.select("*")
        .from_(exp.Subquery(this=union, alias=exp.TableAlias(this=exp.to_identifier("__dvm_change"))))
        .where(exp.NEQ(this=exp.column(WEIGHT), expression=exp.Literal.number(0)))
    )


def _weight_of(kind: str) -> exp.Expr:
    """The weight of a change file's row: +1 inserted or post-image, -1 deleted or pre-image."""
    if kind != "cdc":
        return exp.Literal.number(1 if kind == "add" else -1)
    change = exp.column(CHANGE_TYPE)
    return exp.Case(
        ifs=[
            exp.If(this=change.isin("insert", "update_postimage"), true=exp.Literal.number(1)),
            exp.If(this=change.isin("delete", "update_preimage"), true=exp.Literal.number(-1)),
        ],
        default=exp.Literal.number(0),
    )


def keeps_no_row(conn: Connection, query: exp.Expr, change: str, rows: str) -> bool:
    """Does `query`, a filter over the change view `change`, keep none of its rows? Asked of
    the same rows bound as they are (`rows`: no repartition), which Spark's optimizer folds the
    filter into: no job."""
    probe = query.copy()
    for table in probe.find_all(exp.Table):
        if table.name.lower() == change.lower() and not table.db:
            table.set("this", exp.to_identifier(rows))
    return not conn.rows(render(exp.select("1").from_(sub(probe, "__dvm_probe")).limit(1)))
