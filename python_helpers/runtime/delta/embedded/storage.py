"""The stored result of a stream table in the embedded engine: a Delta table written by delta-rs
whose commits carry the refresh metadata (runtime/delta/metadata.py) as custom commit metadata."""

from __future__ import annotations

from typing import Final, Optional

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError

from python_helpers.dvm.merge_actions import ACTION, DELETE, INSERT, UPSERT
from python_helpers.dvm.stored_reads import ROW_ID, null_safe
from python_helpers.runtime import paths
from python_helpers.runtime.delta import metadata as metadata_format
from python_helpers.runtime.delta.base import ConcurrentCommit
from python_helpers.runtime.delta.embedded.tables import CDF_PROPERTY, arrow_schema, open_table
from python_helpers.runtime.spark_types import normalize_schema

COMPACT_AFTER_FILES = 48  # fewer, larger files for the MERGE; compaction commits carry no offsets
# Row groups of the files delta-rs writes (MERGE, compaction). Spark splits a file between tasks
# only at row groups, and delta-rs writes up to about a million rows per group: a MERGE rewrote a
# stored result of two files into one of one group, which the next refresh read in one task
# (the demo's third run: `top_customers` 0.90 -> 1.30 s on two cores).
ROW_GROUP_ROWS = 128 * 1024
# Given any writer properties, delta-rs leaves the files uncompressed unless told: the demo's
# `north_flags` (10 M rows) went from Spark's 41 MB to 101 MB at its first MERGE; snappy, as
# Spark and delta-rs' own default write, keeps it at 61 MB.
COMPRESSION: Final = "SNAPPY"


def _writer() -> WriterProperties:
    return WriterProperties(max_row_group_size=ROW_GROUP_ROWS, compression=COMPRESSION)


def read_metadata(path: str) -> Optional[dict]:
    """Metadata of the newest refresh commit, with `read_version`: the storage version it is valid
    for. The refresh reads the stored rows and MERGEs at exactly that version, so a refresh that
    commits in between makes this one's commit fail instead of applying a change twice.

    Commits without metadata after it are skipped when they keep the rows (compaction, vacuum:
    ROWS_KEPT_BY); any other is listed under `foreign_commits` ({version, operation}, oldest
    first): the stored rows are no longer what the refresh committed."""
    table = open_table(path)
    if table is None:
        return None
    pinned = table.version()
    for limit in (32, None):  # the newest commits nearly always hold it; the whole log is slow
        commits = table.history(limit)
        found = metadata_format.newest_refresh(
            (
                (c.get("version", -1), c.get("timestamp"), c.get("operation"), c.get(metadata_format.METADATA_KEY))
                for c in commits
            ),
            pinned,
        )
        if found is not None or (limit is not None and len(commits) < limit):
            return found
    return None


def refresh_commits(path: str) -> list:
    """Every refresh commit in the log, oldest first (metadata.refresh_commits)."""
    table = open_table(path)
    if table is None:
        return []
    return metadata_format.refresh_commits(
        (
            c.get("version", -1),
            c.get("timestamp"),
            c.get("operation"),
            c.get(metadata_format.METADATA_KEY),
            c.get("operationMetrics"),
        )
        for c in table.history()
    )


def _commit(metadata: dict, read_version: Optional[int]) -> CommitProperties:
    sequence = 0 if read_version is None else read_version + 1
    return CommitProperties(
        custom_metadata={metadata_format.METADATA_KEY: metadata_format.encode(metadata)},
        app_transactions=[Transaction(app_id=metadata_format.APP_ID, version=sequence)],
    )


def _concurrent(err: Exception) -> ConcurrentCommit:
    return ConcurrentCommit(str(err).splitlines()[0][:300])


def commit_files(path: str, schema: pa.Schema, adds: list, metadata: dict, read_version: Optional[int]) -> int:
    """Replace the stored result (schema included) in one commit by data files already written
    under `path` (`adds`: deltalake AddActions, paths relative to the table); returns the new
    version.

    `read_version`: the stored version the refresh read (None: it found no table); a commit by
    anyone else since makes this one fail with ConcurrentCommit, nothing committed."""
    from deltalake import Schema
    from deltalake.transaction import create_table_with_add_actions

    schema = normalize_schema(schema)
    location = paths.for_delta_rs(path)
    if read_version is None:
        if open_table(path) is not None:
            raise ConcurrentCommit("another refresh created the stored result meanwhile")
        try:
            create_table_with_add_actions(
                location,
                Schema.from_arrow(schema),
                adds,
                mode="error",
                configuration={CDF_PROPERTY: "true"},
                commit_properties=_commit(metadata, None),
            )
        except (CommitFailedError, DeltaError) as err:
            if open_table(path) is not None:
                raise _concurrent(err) from None
            raise
    else:
        replaced = DeltaTable(location, version=read_version)
        counts = metadata.get(metadata_format.WRITTEN)
        if isinstance(counts, dict):
            metadata = metadata_format.with_written(metadata, **counts, files_removed=len(replaced.file_uris()))
        try:
            replaced.create_write_transaction(
                adds,
                mode="overwrite",
                schema=Schema.from_arrow(schema),
                commit_properties=_commit(metadata, read_version),
            )
        except CommitFailedError as err:
            raise _concurrent(err) from None
    return DeltaTable(location).version()


def commit_rewrite(path: str, removes: list, adds: list, metadata: dict, read_version: int) -> None:
    """Replace some stored files by others already written under `path` (deltalake
    RemoveActions and AddActions, paths relative to the table) in one commit with the offsets,
    against the version the refresh read: a commit by anyone else since makes it fail with
    ConcurrentCommit, nothing committed."""
    table = DeltaTable(paths.for_delta_rs(path), version=read_version)
    try:
        table.create_write_transaction(
            [*removes, *adds], mode="append", schema=table.schema(), commit_properties=_commit(metadata, read_version)
        )
    except CommitFailedError as err:
        raise _concurrent(err) from None


def merge_rows(path: str, rows: pa.Table, columns: list, match: list, metadata: dict, read_version: int) -> dict:
    """Apply upserts ('U'), deletes ('D') and inserts ('I', meeting no stored row) matched by the
    `match` columns (Delta.merge) in one commit with the offsets.

    The MERGE runs against the version the refresh read (`read_version`); if another writer
    committed in between, the commit fails (ConcurrentCommit) and nothing is applied.
    """
    table = DeltaTable(paths.for_delta_rs(path), version=read_version)
    rows = _like_target(rows, table)
    inserts = pc.equal(rows.column(ACTION), INSERT)
    if pc.all(inserts).as_py():
        # Only inserts (a bag's added rows): an append, which reads no stored file.
        _append(table, rows.select(columns), metadata_format.with_inserts_only(metadata, rows.num_rows), read_version)
        return {"num_target_rows_inserted": rows.num_rows}
    quoted = {c: _quoted(c) for c in columns + list(match) + [ACTION]}
    updates = {quoted[c]: f"s.{quoted[c]}" for c in columns}
    predicate = _matches(match, quoted)
    if pc.any(inserts).as_py():
        # Only a bag stored as its rows come has them (bag_result.py): the condition is longer
        # for no other result.
        predicate = f"({predicate}) AND s.{quoted[ACTION]} <> '{INSERT}'"
    merger = table.merge(
        source=rows,
        predicate=predicate,
        source_alias="s",
        target_alias="t",
        writer_properties=_writer(),
        commit_properties=_commit(metadata, read_version),
    )
    merger = (
        merger.when_matched_delete(predicate=f"s.{quoted[ACTION]} = '{DELETE}'")
        .when_matched_update(updates=updates, predicate=f"s.{quoted[ACTION]} = '{UPSERT}'")
        .when_not_matched_insert(updates=updates, predicate=f"s.{quoted[ACTION]} <> '{DELETE}'")
    )
    try:
        return merger.execute()
    except CommitFailedError as err:
        raise _concurrent(err) from None


def _matches(match: list, quoted: dict) -> str:
    """The MERGE's condition (stored_reads.null_safe) in DataFusion's SQL, which plans `IS NOT
    DISTINCT FROM` as a hash join too: 0.40 s against 0.45 s by a row id, 1,000 rows into 2 M."""
    if not null_safe(match):
        return f"t.{quoted[ROW_ID]} = s.{quoted[ROW_ID]}"
    return " AND ".join(f"(t.{quoted[c]} IS NOT DISTINCT FROM s.{quoted[c]})" for c in match)


def _quoted(name: str) -> str:
    """A column name in delta-rs' SQL (DataFusion): double quotes, doubled inside."""
    return '"' + name.replace('"', '""') + '"'


def _like_target(rows: pa.Table, table: DeltaTable) -> pa.Table:
    """Cast the MERGE source to the stored table's exact types, nested nullability included:
    delta-rs' MERGE panics when, e.g., a list's element nullability differs between the two."""
    target = arrow_schema(table)
    rows = rows.cast(normalize_schema(rows.schema))
    fields = [target.field(n) if n in target.names else rows.schema.field(n) for n in rows.column_names]
    rows = rows.cast(pa.schema(fields))
    # take() rebuilds every buffer: Spark's Arrow output can hold an empty child array without
    # an offsets buffer, on which delta-rs' MERGE panics as well.
    return rows.take(pa.array(range(rows.num_rows), type=pa.int64()))


def commit_offsets_only(path: str, metadata: dict, read_version: int) -> None:
    """Advance the offsets when the change touched no stored row: an empty commit that still
    conflicts with any other refresh commit since `read_version` (its application transaction)."""
    table = DeltaTable(paths.for_delta_rs(path), version=read_version)
    _append(table, arrow_schema(table).empty_table(), metadata_format.with_inserts_only(metadata), read_version)


def _append(table: DeltaTable, rows: pa.Table, metadata: dict, read_version: int) -> None:
    """Append `rows` (the stored columns, none for a commit of the offsets alone) in one commit
    with the offsets, which fails with ConcurrentCommit after any other refresh commit since
    `read_version` (the application transaction)."""
    try:
        write_deltalake(
            table,
            rows,
            mode="append",
            writer_properties=_writer(),
            commit_properties=_commit(metadata, read_version),
        )
    except CommitFailedError as err:
        raise _concurrent(err) from None


def maybe_compact(path: str) -> bool:
    """Compact the stored result when it has many files (a commit without offsets). A conflict
    with a concurrent refresh only postpones it."""
    table = DeltaTable(paths.for_delta_rs(path))
    if len(table.file_uris()) <= COMPACT_AFTER_FILES:
        return False
    try:
        table.optimize.compact(writer_properties=_writer())
    except CommitFailedError:
        return False
    return True
