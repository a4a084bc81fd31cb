"""The stored result of a stream table: a Delta table whose commits carry the refresh offsets.

The offsets (source versions consumed), the query fingerprint and the layout are written as
custom commit metadata of the same commit that changes the stored rows, so a refresh is applied
exactly once: a crash before that commit leaves old rows and old offsets; after it, new and new.
"""
from __future__ import annotations

import json
from typing import Optional

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError

from python_helpers.runtime.delta_tables import CDF_PROPERTY, local_path, normalize_schema, open_table

METADATA_KEY = "dbt_spark_stream"
FORMAT_VERSION = 1
COMPACT_AFTER_FILES = 48  # keep the view's file list short; compaction commits carry no offsets


def read_metadata(path: str) -> Optional[dict]:
    """Metadata of the newest refresh commit, with `read_version`: the storage version it is valid
    for. The refresh reads the stored rows and MERGEs at exactly that version, so a refresh that
    commits in between makes this one's commit fail instead of applying a change twice.
    Commits by others (e.g. compaction) carry no metadata and are skipped."""
    table = open_table(path)
    if table is None:
        return None
    pinned = table.version()
    for limit in (32, None):  # the newest commits nearly always hold it; the whole log is slow
        commits = table.history(limit)
        for commit in commits:
            if commit.get("version", -1) > pinned:
                continue
            raw = commit.get(METADATA_KEY)
            if raw:
                meta = json.loads(raw)
                meta["storage_version"] = commit.get("version")
                meta["read_version"] = pinned
                return meta
        if limit is not None and len(commits) < limit:
            break
    return None


def _commit(metadata: dict) -> CommitProperties:
    return CommitProperties(custom_metadata={METADATA_KEY: json.dumps(metadata, sort_keys=True)})


def write_full(path: str, data: pa.Table, metadata: dict) -> int:
    """Replace the stored result (schema included) in one commit; returns the new version."""
    data = data.cast(normalize_schema(data.schema))
    existing = open_table(path)
    write_deltalake(
        path, data, mode="overwrite", schema_mode="overwrite" if existing is not None else None,
        configuration={CDF_PROPERTY: "true"}, commit_properties=_commit(metadata),
    )
    return DeltaTable(path).version()


def merge_rows(path: str, rows: pa.Table, columns: list, row_id: str, action: str, metadata: dict,
               read_version: int) -> dict:
    """Apply upserts ('U') and deletes ('D') keyed by `row_id` in one commit with the offsets.

    The MERGE runs against the version the refresh read (`read_version`); if another writer
    committed in between, delta-rs' conflict check fails the commit and nothing is applied.
    """
    table = DeltaTable(path, version=read_version)
    rows = _like_target(rows, table)
    updates = {c: f"s.`{c}`" for c in columns}
    merger = table.merge(
        source=rows, predicate=f"t.`{row_id}` = s.`{row_id}`", source_alias="s", target_alias="t",
        commit_properties=_commit(metadata),
    )
    merger = (merger.when_matched_delete(predicate=f"s.`{action}` = 'D'")
              .when_matched_update(updates=updates, predicate=f"s.`{action}` = 'U'")
              .when_not_matched_insert(updates=updates, predicate=f"s.`{action}` = 'U'"))
    return merger.execute()


def _like_target(rows: pa.Table, table: DeltaTable) -> pa.Table:
    """Cast the MERGE source to the stored table's exact types, nested nullability included:
    delta-rs' MERGE panics when, e.g., a list's element nullability differs between the two."""
    raw = table.schema().to_arrow() if hasattr(table.schema(), "to_arrow") else table.schema().to_pyarrow()
    target = normalize_schema(pa.schema(raw))
    rows = rows.cast(normalize_schema(rows.schema))
    fields = [target.field(n) if n in target.names else rows.schema.field(n) for n in rows.column_names]
    rows = rows.cast(pa.schema(fields))
    # take() rebuilds every buffer: Spark's Arrow output can hold an empty child array without
    # an offsets buffer, on which delta-rs' MERGE panics as well.
    return rows.take(pa.array(range(rows.num_rows), type=pa.int64()))


def commit_offsets_only(path: str, metadata: dict, read_version: int) -> None:
    """Advance the offsets when the change touched no stored row (an empty append commit)."""
    table = DeltaTable(path, version=read_version)
    empty = pa.Table.from_batches([], schema=normalize_schema(pa.schema(
        table.schema().to_arrow() if hasattr(table.schema(), "to_arrow") else table.schema().to_pyarrow())))
    write_deltalake(table, empty, mode="append", commit_properties=_commit(metadata))


def maybe_compact(path: str) -> None:
    table = DeltaTable(path)
    if len(table.file_uris()) > COMPACT_AFTER_FILES:
        table.optimize.compact()


def live_files(path: str) -> list:
    return [local_path(u) for u in DeltaTable(path).file_uris()]


__all__ = ["read_metadata", "write_full", "merge_rows", "commit_offsets_only", "maybe_compact", "live_files",
           "CommitFailedError", "DeltaError", "FORMAT_VERSION"]
