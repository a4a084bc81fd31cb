"""Files the executors write and the dbt process reads: a query's result written as parquet by
Spark (any connection: it is one SQL statement), listed, read back or removed with pyarrow, on
a local path or a storage URI.

The Thrift binding reads results back this way; the embedded Delta engine commits such files
into a stored result without reading their rows (delta/embedded/executor_writes.py).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any, Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from python_helpers.runtime import paths

# Spark writes timestamps as INT96 unless told otherwise; pyarrow reads INT96 as nanoseconds
# without a time zone, which cannot hold years before 1677 or after 2262. Microseconds with the
# time zone hold them all: callers write with this setting (the Thrift binding sets it on its
# session, the embedded engine's full refresh while it writes: refresh/scan_settings.py).
TIMESTAMP_TYPE_KEY = "spark.sql.parquet.outputTimestampType"
TIMESTAMP_TYPE = "TIMESTAMP_MICROS"


@dataclass(frozen=True)
class WrittenFile:
    path: str  # absolute: a local path or a URI
    size: int
    modified_ms: int


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _string(value: str) -> str:
    """A Spark SQL string literal (backslashes doubled: Spark reads them as escapes)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


# The subquery a written result is selected from.
WRITTEN_ALIAS = "__dvm_written"


def write_query(conn: Any, sql: str, names: Optional[list], where: str) -> None:
    """The executors write the result of `sql` (its columns renamed to `names`, positionally) as
    parquet files into the directory `where`, which they replace."""
    listed = f" ({', '.join(_ident(n) for n in names)})" if names is not None else ""
    # A subquery with a column list renames positionally (a query's own names may repeat) and
    # keeps a leading WITH (INSERT cannot follow a CTE list; a recursive one is fine inside).
    # It replaced a temporary view, whose creation analysed the query once more and cost two
    # more statements (0.06-0.27 s a build on the demo's and TPC-H's models). The newline ends
    # a trailing `--` comment of the query before the parenthesis.
    conn.execute(
        f"INSERT OVERWRITE DIRECTORY {_string(paths.for_spark(where, where))} USING parquet "
        f"SELECT * FROM ({sql}\n) AS {_ident(WRITTEN_ALIAS)}{listed}"
    )


def _filesystem(where: str):
    import pyarrow.fs as pafs

    return pafs.FileSystem.from_uri(paths.for_delta_rs(where))


def _is_data(name: str) -> bool:
    return name.endswith(".parquet") and not name.startswith((".", "_"))


def parquet_files(where: str) -> list:
    """The parquet data files Spark wrote under `where` (not its _SUCCESS or checksum files),
    sorted, as WrittenFile."""
    if paths.is_uri(where):
        import pyarrow.fs as pafs

        fs, inner = _filesystem(where)
        infos = fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True))
        base = where.rstrip("/")
        return sorted(
            WrittenFile(f"{base}/{paths.basename(i.path)}", int(i.size or 0), int((i.mtime_ns or 0) // 1_000_000))
            for i in infos
            if _is_data(paths.basename(i.path))
        )
    local = paths.local(where)
    if not os.path.isdir(local):
        return []
    out = []
    for name in sorted(os.listdir(local)):
        if _is_data(name):
            stat = os.stat(os.path.join(local, name))
            out.append(WrittenFile(os.path.join(local, name), stat.st_size, int(stat.st_mtime * 1000)))
    return out


def footer(file: WrittenFile) -> pq.FileMetaData:
    """The parquet footer of a file (its schema, row count and statistics; no rows read)."""
    if paths.is_uri(file.path):
        fs, inner = _filesystem(file.path)
        with fs.open_input_file(inner) as handle:
            return pq.read_metadata(handle)
    return pq.read_metadata(file.path)


def read_directory(where: str) -> Optional[pa.Table]:
    """The parquet files Spark wrote under `where`, as one table (None when it wrote none)."""
    import pyarrow.dataset as ds

    files = parquet_files(where)
    if not files:
        return None
    if paths.is_uri(where):
        fs, _ = _filesystem(where)
        return ds.dataset([_filesystem(f.path)[1] for f in files], format="parquet", filesystem=fs).to_table()
    return pa.concat_tables([pq.read_table(f.path) for f in files])


def make_dir(where: str) -> None:
    if paths.is_uri(where):
        fs, inner = _filesystem(where)
        fs.create_dir(inner, recursive=True)
    else:
        os.makedirs(paths.local(where), exist_ok=True)


def write_parquet(data: pa.Table, where: str) -> None:
    """Rows the client holds, as one parquet file in the directory `where`."""
    dictionary = dictionary_columns(data)
    if paths.is_uri(where):
        fs, inner = _filesystem(where)
        fs.create_dir(inner, recursive=True)
        pq.write_table(data, f"{inner}/part-0.parquet", filesystem=fs, use_dictionary=dictionary)
        return
    local = paths.local(where)
    os.makedirs(local, exist_ok=True)
    pq.write_table(data, os.path.join(local, "part-0.parquet"), use_dictionary=dictionary)


# Rows of each column looked at, and the share of them that may be distinct, for a dictionary.
DICTIONARY_SAMPLE_ROWS = 100_000
DICTIONARY_MAX_DISTINCT = 0.5


def dictionary_columns(data: pa.Table) -> list:
    """The columns worth a parquet dictionary: few distinct values among the first rows. Arrow
    tries a dictionary on every column by default, and on a column of mostly distinct values (an
    id) it builds one per row group before falling back: 5 M rows of a bigint id, a boolean and
    a count took 1.2 s to write that way and 0.22 s with a dictionary on the count only, in a
    file a third smaller."""
    sample = data.slice(0, DICTIONARY_SAMPLE_ROWS)
    if not sample.num_rows:
        return list(data.column_names)
    limit = DICTIONARY_MAX_DISTINCT * sample.num_rows
    out = []
    for name in data.column_names:
        try:
            few = pc.count_distinct(sample.column(name), mode="all").as_py() <= limit
        except pa.ArrowNotImplementedError:
            few = False  # a nested column: pyarrow takes a list of names by leaf path, none here
        if few:
            out.append(name)
    return out


def remove(where: str) -> None:
    """Remove the directory `where` (a failure leaves it for housekeeping)."""
    if paths.is_uri(where):
        try:
            fs, inner = _filesystem(where)
            fs.delete_dir(inner)
        except Exception:  # noqa: BLE001 - left behind: removed by the next sweep
            pass
        return
    shutil.rmtree(paths.local(where), ignore_errors=True)


def remove_older(where: str, seconds: float) -> int:
    """Remove the entries of the directory `where` last modified more than `seconds` ago;
    returns how many. Best effort: what cannot be listed or removed stays for the next sweep."""
    import time

    cutoff = time.time() - seconds
    removed = 0
    try:
        if paths.is_uri(where):
            import pyarrow.fs as pafs

            fs, inner = _filesystem(where)
            for info in fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True)):
                if info.mtime is not None and info.mtime.timestamp() < cutoff:
                    if info.type == pafs.FileType.Directory:
                        fs.delete_dir(info.path)
                    else:
                        fs.delete_file(info.path)
                    removed += 1
            return removed
        local = paths.local(where)
        for name in os.listdir(local) if os.path.isdir(local) else []:
            path = os.path.join(local, name)
            if os.path.getmtime(path) < cutoff:
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.remove(path)
                removed += 1
    except Exception:  # noqa: BLE001 - a sweep never fails a refresh
        pass
    return removed
