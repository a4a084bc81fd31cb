"""Delta tables through the `deltalake` package (delta-rs), read into Spark (embedded engine).

Snapshots are native Spark parquet scans of a version's live files (no data through Python);
change feeds come from delta-rs' CDF reader as Arrow and enter Spark as a DataFrame.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Iterable, Optional

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from python_helpers.dvm.tree import WEIGHT
from python_helpers.runtime import paths
from python_helpers.runtime.connections.base import Connection
from python_helpers.runtime.delta.base import CDF_PROPERTY, TableState
from python_helpers.runtime.spark_types import normalize_schema


def is_delta_table(path: str) -> bool:
    """Is there a Delta table at `path`? (Locally, without reading its log.)"""
    if paths.is_uri(path):
        return open_table(path) is not None
    return os.path.isdir(os.path.join(paths.local(path), "_delta_log"))


def open_table(path: str, version: Optional[int] = None) -> Optional[DeltaTable]:
    """The Delta table at `path` (optionally at `version`), or None when there is none."""
    if not paths.is_uri(path) and not os.path.isdir(os.path.join(paths.local(path), "_delta_log")):
        return None
    location = paths.for_delta_rs(path)
    try:
        return DeltaTable(location, version=version) if version is not None else DeltaTable(location)
    except TableNotFoundError:
        return None


def table_at(path: str, version: Optional[int] = None) -> DeltaTable:
    """The Delta table at `path` (optionally at `version`) that the caller has already found:
    a table gone since is an error, not a None to carry on with."""
    table = open_table(path, version)
    if table is None:
        raise FileNotFoundError(f"no Delta table at {path} (removed while the refresh ran?)")
    return table


def add_actions(table: DeltaTable) -> pa.Table:
    """The snapshot's add actions (one row per live file) as a pyarrow table."""
    actions = table.get_add_actions(flatten=True)
    if isinstance(actions, pa.Table):
        return actions
    if hasattr(actions, "__arrow_c_stream__"):
        # Through the Arrow C stream: pa.table() would first ask whether this is a pandas frame,
        # importing pandas (a third of a second of every fresh dbt process).
        return pa.RecordBatchReader.from_stream(actions).read_all()
    return pa.table(actions.to_pyarrow() if hasattr(actions, "to_pyarrow") else actions)


def bytes_of_files(actions, all_files: list, files: Optional[Iterable[str]] = None) -> int:
    """Bytes of `files` (all live files when None), given the snapshot's add actions and its
    file list in the same order (add_actions / file_paths)."""
    import pyarrow.compute as pc

    if "size_bytes" not in actions.column_names:
        return 0
    if files is None:
        return int(pc.sum(actions.column("size_bytes")).as_py() or 0)
    wanted = set(files)
    sizes = actions.column("size_bytes").to_pylist()
    return int(sum(s or 0 for f, s in zip(all_files, sizes) if f in wanted))


def file_paths(table: DeltaTable, table_path: str) -> list:
    """The live data files of `table`, as Spark reads them (local paths or URIs).

    Built from the log's relative paths (URI-encoded once: a partition directory `p=%7Bc%7D`
    is `p=%257Bc%257D` there) under the table path as the project keeps it; delta-rs'
    file_uris() encodes the table root but not the rest, which no reader can take apart."""
    from urllib.parse import unquote

    out = []
    for rel in add_actions(table).column("path").to_pylist():
        if "://" in rel or rel.startswith("/"):
            out.append(paths.for_spark(rel, table_path))
        else:
            out.append(paths.join(table_path, *unquote(rel).split("/")))
    return out


def parquet_datasets(table: DeltaTable, table_path: str) -> list:
    """The live data files of `table` as pyarrow datasets, one per physical schema (a string is
    a string_view in the files delta-rs' MERGE writes and a string in Spark's, and a scan's
    filter must meet each file in its own types), read by their own footers. Not delta-rs'
    to_pyarrow_dataset(): it turns each file's log statistics into a guarantee, and a column the
    log has no min/max for (a boolean, which the executors' adds leave out:
    executor_writes.stats_of) becomes `>= null`, which no filter on it passes."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    files = file_paths(table, table_path)
    fs = None
    if files and paths.is_uri(files[0]):
        import pyarrow.fs as pafs

        fs = pafs.FileSystem.from_uri(paths.for_delta_rs(files[0]))[0]
        files = [pafs.FileSystem.from_uri(paths.for_delta_rs(f))[1] for f in files]
    else:
        files = [paths.local(f) for f in files]
    by_schema: dict = {}
    for f in files:
        try:
            schema = pq.read_schema(f, filesystem=fs).remove_metadata()
        except pa.ArrowException as err:
            raise type(err)(f"the stored file {f}: {err}") from None
        by_schema.setdefault(schema, []).append(f)
    return [ds.dataset(group, schema=schema, format="parquet", filesystem=fs) for schema, group in by_schema.items()]


def arrow_schema(table: DeltaTable) -> pa.Schema:
    schema = table.schema()
    # deltalake 1.x has to_arrow; older releases only to_pyarrow.
    raw = schema.to_arrow() if hasattr(schema, "to_arrow") else schema.to_pyarrow()  # type: ignore[attr-defined]
    return normalize_schema(pa.schema(raw))


def state_of(table: DeltaTable, path: str) -> TableState:
    meta = table.metadata()
    config = meta.configuration or {}
    protocol = table.protocol()
    features = set((protocol.reader_features or [])) | set(protocol.writer_features or [])
    unreadable = sorted(f for f in features if f in ("deletionVectors", "columnMapping"))
    if config.get("delta.columnMapping.mode", "none") not in ("none", None) and "columnMapping" not in unreadable:
        unreadable.append("columnMapping")
    return TableState(
        path=path,
        version=table.version(),
        table_id=str(meta.id),
        cdf_enabled=str(config.get(CDF_PROPERTY, "false")).lower() == "true",
        arrow_schema=arrow_schema(table),
        partition_columns=list(meta.partition_columns or []),
        unreadable_features=unreadable,
    )


# (path, table id, version) -> the version's data files. A version of a Delta table never
# changes, so its file list is read from the log once per process: the old snapshot of one
# refresh is the new snapshot of the previous one, and models share their sources.
_VERSION_FILES: "OrderedDict" = OrderedDict()
_VERSION_FILES_KEPT = 64
_VERSION_FILES_LOCK = threading.Lock()  # dbt runs models on several threads in one process


def bind_snapshot(conn: Connection, name: str, state: TableState, version: int, columns: Optional[list] = None) -> None:
    """The temporary view `name` over the table at `version` (its live parquet files); the
    connection may reuse the scan, since a version never changes."""
    key = (state.path, state.table_id, version)
    with _VERSION_FILES_LOCK:
        known = _VERSION_FILES.get(key)
        if known is not None:
            _VERSION_FILES.move_to_end(key)
    if known is None:
        table = table_at(state.path, version)
        schema = schema_at(state, table)
        known = (file_paths(table, state.path), schema)
        with _VERSION_FILES_LOCK:
            _VERSION_FILES[key] = known
            while len(_VERSION_FILES) > _VERSION_FILES_KEPT:
                _VERSION_FILES.popitem(last=False)
    files, schema = known
    _bind(conn, name, state, files, schema, columns, cache_key=("snapshot", *key))


def bind_files(
    conn: Connection, name: str, state: TableState, table: DeltaTable, files: list, columns: Optional[list] = None
) -> None:
    """The temporary view `name` over some of the data files of `table` (opened at the version
    read), e.g. those file statistics leave in."""
    _bind(conn, name, state, files, schema_at(state, table), columns)


def schema_at(state: TableState, table: DeltaTable) -> pa.Schema:
    """The Arrow schema of `table` (the source opened at some version): the state's, read once,
    when it is that version."""
    return state.arrow_schema if table.version() == state.version else arrow_schema(table)


def _bind(
    conn: Connection,
    name: str,
    state: TableState,
    files: list,
    schema: pa.Schema,
    columns: Optional[list],
    cache_key: Optional[tuple] = None,
) -> None:
    # Partition values live in the directory names (hive style), found from the table root.
    base = paths.for_spark(state.path, state.path) if state.partition_columns else None
    # Each path is a Hadoop glob pattern: escape what would be read as one.
    escaped = [paths.glob_escaped(f) for f in files]
    conn.view_of_files(name, escaped, schema, base, columns, cache_key=cache_key)


def _key_stats(table: DeltaTable, table_path: str, column: str):
    """Per live file: (path, min, max, null count, rows) of `column` from the log, and the
    statistics' Arrow type; None when the log has no comparable statistics for the column."""
    actions = add_actions(table)
    lo_name, hi_name, nulls_name = f"min.{column}", f"max.{column}", f"null_count.{column}"
    if lo_name not in actions.column_names or hi_name not in actions.column_names:
        return None
    stat_type = actions.schema.field(lo_name).type
    if not (
        pa.types.is_integer(stat_type)
        or pa.types.is_string(stat_type)
        or pa.types.is_large_string(stat_type)
        or pa.types.is_date(stat_type)
    ):
        return None  # decimals and timestamps: the log's rendering is not compared here
    files = file_paths(table, table_path)
    los, his = actions.column(lo_name).to_pylist(), actions.column(hi_name).to_pylist()
    nulls = actions.column(nulls_name).to_pylist() if nulls_name in actions.column_names else [None] * len(files)
    has_records = "num_records" in actions.column_names
    records = actions.column("num_records").to_pylist() if has_records else [None] * len(files)
    return stat_type, list(zip(files, los, his, nulls, records))


def _kept(stats: list, meets) -> list:
    """The files `meets(lo, hi)` keeps; files of NULLs only hold no row an equality can match,
    and a file without statistics cannot be ruled out."""
    out = []
    for f, lo, hi, n_null, n in stats:
        if lo is None or hi is None:
            if n is not None and n_null is not None and n_null >= n:
                continue  # only NULLs in this file
            out.append(f)
        elif meets(lo, hi):
            out.append(f)
    return out


def files_meeting_keys(table: DeltaTable, table_path: str, column: str, keys: pa.Array) -> Optional[list]:
    """The live files whose [min, max] of `column` (the log's statistics) holds one of `keys`
    (non-null values); None when the statistics cannot decide (no stats for the column, or a
    type they cannot be compared in), and the caller reads every file.

    Files whose values of `column` are all NULL hold no row an equality can match."""
    import bisect

    found = _key_stats(table, table_path, column)
    if found is None:
        return None
    stat_type, stats = found
    try:
        wanted = sorted(set(pa.compute.drop_null(keys.cast(stat_type)).to_pylist()))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None

    def meets(lo, hi) -> bool:
        at = bisect.bisect_left(wanted, lo)
        return at < len(wanted) and wanted[at] <= hi

    return _kept(stats, meets)


def files_meeting_ranges(table: DeltaTable, table_path: str, column: str, ranges: list) -> Optional[list]:
    """The live files whose [min, max] of `column` overlaps one of `ranges` ([lo, hi] pairs of
    integers or dates that cover every non-null changed key); None when the statistics cannot
    decide, as for files_meeting_keys. Ranges stand in for the keys of a change too large to
    fetch them: they keep a superset of the files the keys would keep."""
    import bisect
    import datetime

    found = _key_stats(table, table_path, column)
    if found is None:
        return None
    stat_type, stats = found
    if pa.types.is_integer(stat_type):
        kind: type = int
    elif pa.types.is_date(stat_type):
        kind = datetime.date
    else:
        return None
    bounds = [(lo, hi) for lo, hi in ranges if lo is not None and hi is not None]
    # bool is an int and datetime a date: neither compares as the statistics do
    if any(type(v) is not kind for pair in bounds for v in pair):
        return None
    merged: list = []
    for lo, hi in sorted(bounds):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    his = [hi for _, hi in merged]

    def meets(lo, hi) -> bool:
        at = bisect.bisect_left(his, lo)  # the first range not wholly below the file
        return at < len(merged) and merged[at][0] <= hi

    return _kept(stats, meets)


def consolidate_arrow(data: pa.Table) -> Optional[pa.Table]:
    """Sum the weights of identical rows and drop those that cancel (an update that changed no
    column read here), before the rows ever reach Spark. None when Arrow cannot group by these
    column types (nested ones); Spark consolidates then. Treating -0.0 and 0.0, or two NaNs, as
    different rows only consolidates less, which every delta rule tolerates."""
    keys = [n for n in data.column_names if n != WEIGHT]
    if data.num_rows == 0:
        return data
    try:  # keys is never empty: every source is read for at least one column
        grouped = data.group_by(keys, use_threads=False).aggregate([(WEIGHT, "sum")])
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    grouped = grouped.rename_columns([(WEIGHT if n == f"{WEIGHT}_sum" else n) for n in grouped.column_names])
    grouped = grouped.filter(pa.compute.not_equal(grouped.column(WEIGHT), 0))
    return grouped.select(data.column_names).cast(data.schema)
