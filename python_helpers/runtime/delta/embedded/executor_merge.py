"""A differential refresh of a large stored result, applied by Spark's executors.

delta-rs' MERGE runs in the dbt process and rewrites there every stored file that holds a
changed row id: at 60 M stored rows that held 1.3-1.6 GiB of the dbt process. Past
`FROM_STORED_ROWS` the embedded engine applies the change the way a copy-on-write MERGE does,
with the executors doing the reading and writing:

1. the merge rows are computed once, in Spark (a materialized view);
2. one job over the stored row ids alone finds the files that hold a changed row id, and counts
   what the change matches (updates, deletes);
3. the executors write those files' other rows and the upserts into a new directory of the
   table (`merge-<id>/`);
4. the dbt process reads the new files' footers and commits remove (the touched files) + add
   (the new ones) with the offsets, at the version the refresh read: a rival's commit since
   makes it fail, nothing applied, like every other commit of a refresh.

No stored row passes through the dbt process. What it costs elsewhere: the commit carries no
`cdc` files (delta-rs cannot commit them from here), so a stream table that reads this one
reads the touched files' rows whole, as deletes and inserts that cancel out except for the
change (change_feed.py consolidates them): correct, and as large as the files rewritten.

What a failure leaves: files in a directory that no commit names; a failed commit removes them,
a killed process leaves them to the vacuum (as executor_writes.py).
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any, Callable, Optional
from urllib.parse import unquote

from deltalake.transaction import RemoveAction
from sqlglot import exp

from python_helpers.dvm.merge_actions import ACTION, DELETE, INSERT, UPSERT, is_
from python_helpers.dvm.sqlgen import alias, col, render, sub
from python_helpers.dvm.stored_reads import matches
from python_helpers.runtime import paths
from python_helpers.runtime.connections import files
from python_helpers.runtime.delta import metadata as metadata_format
from python_helpers.runtime.delta.base import ConcurrentCommit, Merged
from python_helpers.runtime.delta.embedded import change_feed, storage, tables
from python_helpers.runtime.delta.embedded.executor_writes import add_actions, check_timestamps, check_view_fits
from python_helpers.runtime.refresh import scan_settings, steps
from python_helpers.runtime.spark_types import spark_type_strings

# Stored rows (the log's count at the version read) from which the executors apply the change.
# Below it delta-rs' MERGE in the dbt process is faster on this 2-core machine (the 6 M-row fact
# of TPC-H SF 1 under 1,000 scattered updates: 3.7 s against the executors' 16.6 s, at 718 MiB
# against 396 MiB of the dbt process) and writes cdc files, so a stream table reading this one
# reads only the change. Past it the dbt process's memory is what matters (1.3-1.6 GiB at 60 M).
FROM_STORED_ROWS = 20_000_000
# The environment variable that moves it (0: every differential refresh of the embedded engine).
FROM_STORED_ROWS_ENV = "DBT_SPARK_STREAM_EXECUTOR_MERGE_ROWS"
# Merge rows up to which the touched rows meet them in a broadcast join (no shuffle of the
# touched files' rows); the merge rows' columns are a result's, so a few million fit.
BROADCAST_MAX_ROWS = 2_000_000
DIRECTORY_PREFIX = "merge-"


def applies_to(target: str, read_version: int) -> Optional[Any]:
    """The stored table at `read_version` when this refresh's change is applied by the
    executors, else None (the one place that decides; `merge` goes on with the table opened)."""
    table = tables.open_table(target, read_version)
    if table is None:
        return None
    rows, _ = change_feed.table_stats(table)
    return table if rows is not None and rows >= _from_stored_rows() else None


def _from_stored_rows() -> int:
    text = os.environ.get(FROM_STORED_ROWS_ENV, "").strip().replace("_", "").replace(",", "")
    return int(text) if text.isdigit() else FROM_STORED_ROWS


def _name(kind: str) -> str:
    return f"__dvm_{kind}_{uuid.uuid4().hex[:12]}"


def _table(name: str) -> exp.Table:
    return exp.to_table(name)


def _touched_query(stored_ids: str, merge_rows: str, match: list, broadcast: bool) -> str:
    """Per stored file holding a changed row (by the `match` columns) and per action: how many
    rows it matches (the merge rows broadcast when few: the stored ids are not shuffled). An
    insert ('I') meets no stored row."""
    ids = exp.select(
        alias(exp.Anonymous(this="input_file_name", expressions=[]), "__dvm_file"), *[col(c) for c in match]
    ).from_(_table(stored_ids))
    joined = (
        exp.select(col("__dvm_file", "s"), col(ACTION, "m"), alias(exp.Count(this=exp.Star()), "n"))
        .from_(sub(ids, "s"))
        .join(
            exp.alias_(_table(merge_rows), "m", table=True),
            on=_meets(match),
            join_type="INNER",
        )
        .group_by(col("__dvm_file", "s"), col(ACTION, "m"))
    )
    return _hinted(joined, "BROADCAST(m)") if broadcast else render(joined)


def _hinted(query: exp.Select, hint: str) -> str:
    """A SELECT rendered with a Spark hint (sqlglot does not carry Spark's hints through every
    rendering; a comment right after SELECT is what Spark reads)."""
    return render(query).replace("SELECT ", f"SELECT /*+ {hint} */ ", 1)


def _rewrite_query(
    touched: Optional[str], merge_rows: str, names: list, types: dict, match: list, broadcast: bool
) -> str:
    """The touched files' rows that the change leaves, then every upsert and insert, in the
    stored types."""
    typed = [alias(exp.Cast(this=col(n, "m"), to=exp.DataType.build(types[n], dialect="spark")), n) for n in names]
    upserts = (
        exp.select(*typed)
        .from_(exp.alias_(_table(merge_rows), "m", table=True))
        .where(exp.Not(this=is_(DELETE, col(ACTION, "m"))))
    )
    # The upserts as one file, not one per partition of the merge rows (a shuffle of the
    # upserts alone; coalescing the merge rows' view would run the delta query's last stage
    # in one task).
    upserts_sql = _hinted(upserts, "REPARTITION(1)")
    if touched is None:
        return upserts_sql
    kept = (
        exp.select(*[col(n, "s") for n in names])
        .from_(exp.alias_(_table(touched), "s", table=True))
        .join(
            exp.alias_(_table(merge_rows), "m", table=True),
            on=_meets(match),
            join_type="LEFT ANTI",
        )
    )
    kept_sql = _hinted(kept, "BROADCAST(m)") if broadcast else render(kept)
    return f"{kept_sql} UNION ALL {upserts_sql}"


def _meets(match: list) -> exp.Expr:
    """A stored row `s` meets a merge row `m` by the `match` columns, unless `m` is an insert."""
    return exp.and_(matches(match, "s", match, "m"), exp.Not(this=is_(INSERT, col(ACTION, "m"))))


def _relative(spark_path: str, by_text: dict, depth: int) -> Optional[str]:
    """The log path of a file as Spark's input_file_name() gives it (a URI, encoded); `by_text`:
    the log paths by their decoded text, none deeper than `depth` directories."""
    parts = unquote(spark_path).split("/")
    for n in range(1, min(depth, len(parts)) + 1):
        rel = by_text.get("/".join(parts[-n:]))
        if rel is not None:
            return rel
    return None


def merge(
    conn: Any,
    target: str,
    sql: str,
    metadata: dict,
    read_version: int,
    phases: Callable,
    match: list,
    table: Any,
) -> Merged:
    """Apply the merge rows of `sql` (their actions: dvm/merge_actions.py, the stored columns; each meets its stored
    row by the `match` columns, Delta.merge) to the stored result at `target` as it was at
    `read_version` (`table`: opened there by `applies_to`), in one commit with `metadata`."""
    schema = tables.arrow_schema(table)
    names = schema.names
    types = spark_type_strings(schema)
    merge_rows, stored_ids, touched_view = _name("merge_rows"), _name("stored_ids"), _name("touched")
    try:
        with phases("delta"):
            conn.view_of_query(merge_rows, sql, materialize=True)
            counted = conn.rows(
                f"SELECT count(*), count_if(`{ACTION}` <> '{DELETE}'), count_if(`{ACTION}` = '{INSERT}') "  # noqa: S608
                f"FROM `{merge_rows}`"
            )
        total, upserts, inserts = (int(v or 0) for v in counted[0])
        steps.reached("delta_computed")
        with phases("merge"):
            steps.reached("merging")
            if not total:
                storage.commit_offsets_only(target, metadata, read_version)
                steps.reached("committed")
                return Merged(0)
            actions = tables.add_actions(table)
            log_paths = actions.column("path").to_pylist()
            sizes = dict(zip(log_paths, actions.column("size_bytes").to_pylist()))
            live_paths = dict(zip(log_paths, tables.file_paths(table, target)))
            state = tables.state_of(table, target)
            matched: dict = {}
            touched: dict = {}  # the touched files' log paths, in the order Spark named them
            by_text = {unquote(p): p for p in log_paths}
            depth = max((t.count("/") + 1 for t in by_text), default=1)
            broadcast = total <= BROADCAST_MAX_ROWS
            # Only inserts (a bag's added rows) meet no stored row: no stored file is read.
            found = []
            if inserts < total:
                tables.bind_files(conn, stored_ids, state, table, list(live_paths.values()), columns=list(match))
                found = conn.rows(_touched_query(stored_ids, merge_rows, match, broadcast))
            for file, what, n in found:
                rel = _relative(str(file), by_text, depth)
                if rel is None:
                    raise RuntimeError(f"a stored file Spark read is not in the log at version {read_version}: {file}")
                touched[rel] = True
                matched[what] = matched.get(what, 0) + int(n)
            updated, deleted = matched.get(UPSERT, 0), matched.get(DELETE, 0)
            if touched:
                tables.bind_files(conn, touched_view, state, table, [live_paths[r] for r in touched])
            directory = f"{DIRECTORY_PREFIX}{uuid.uuid4().hex[:16]}"
            where = paths.join(target, directory)
            rewrite = _rewrite_query(
                touched_view if touched else None,
                merge_rows,
                names,
                types,
                match,
                broadcast=broadcast,
            )
            with scan_settings.exactly(conn, files.TIMESTAMP_TYPE_KEY, files.TIMESTAMP_TYPE):
                files.write_query(conn, rewrite, names, where)
            steps.reached("rewritten")
            try:
                written = files.parquet_files(where)
                footers = [files.footer(f) for f in written]
                if footers:
                    check_timestamps(footers[0].schema.to_arrow_schema())
            except BaseException:
                files.remove(where)  # named by no commit
                raise
            rows = (upserts - updated, updated, deleted)
            try:
                commit_touched(
                    target, directory, written, footers, schema, list(touched), sizes, rows, metadata, read_version
                )
            except ConcurrentCommit:
                files.remove(where)  # the rival's commit stands; these files are named by none
                raise
            # Any other failure of the commit may come after the log named the files (a
            # post-commit hook, an interrupt): they stay, for the vacuum if no commit names them.
            steps.reached("committed")
            return Merged(total, upserts - updated, updated, deleted, len(touched), by_executors=True)
    finally:
        for name in (merge_rows, stored_ids, touched_view):
            conn.drop_view(name)


def commit_touched(
    target: str,
    directory: str,
    written: list,
    footers: list,
    schema: Any,
    removed: Any,
    sizes: dict,
    rows: tuple,
    metadata: dict,
    read_version: int,
) -> None:
    """Commit the files written into `directory` of the table (`written`, their `footers`) in
    place of the stored files `removed` (log paths; `sizes` of every live file by log path),
    with `metadata` counting `rows` (inserted, updated, deleted), at `read_version`: a rival's
    commit since fails it with ConcurrentCommit. The one commit of a rewrite of touched files
    (the executors' here, the dbt process's in bag_rewrite.py)."""
    adds = add_actions(directory, written, footers, schema)
    check_view_fits(metadata.get("model", "?"), target, adds)
    now = int(time.time() * 1000)
    removes = [RemoveAction(rel, True, now, sizes.get(rel), {}) for rel in removed]
    inserted, updated, deleted = rows
    counts = metadata_format.with_written(
        metadata,
        rows_inserted=inserted,
        rows_updated=updated,
        rows_deleted=deleted,
        rows_written=sum(f.num_rows for f in footers),
        files_added=len(adds),
        files_removed=len(removes),
    )
    storage.commit_rewrite(target, removes, adds, counts, read_version)
