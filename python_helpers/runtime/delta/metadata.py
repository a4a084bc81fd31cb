"""What a refresh commit records beside the rows, for both engines.

The offsets (source versions consumed), the query fingerprint, the layout, the settings and
Spark's analysis travel as metadata of the same Delta commit that changes the stored rows, so a
refresh is applied exactly once: a crash before that commit leaves old rows and old offsets;
after it, new and new. The embedded engine writes it as the commit's custom metadata under
METADATA_KEY, the spark engine as the commit's `userMetadata`; both are the same JSON.
"""

from __future__ import annotations

import json
from typing import Iterable, Optional

METADATA_KEY = "dbt_spark_stream"
# 2: offsets, settings and the schema of the read columns in every commit; commits that
# conflict with each other (an application transaction in each).
# 3: the digest of the plan the stored state was kept by (`plan`), checked by every
# differential refresh; a stored result of format 2 is rebuilt once.
FORMAT_VERSION = 3
# Every refresh commit carries a Delta application transaction of this id. Two commits that both
# carry one conflict in Delta's optimistic concurrency check, whatever else they do, so no
# refresh commit (not even one that only moves the offsets) can slip in after another refresh
# read the same version.
APP_ID = "dbt_spark_stream"
# Commits without refresh metadata that leave the stored rows as they are: our own compaction
# and vacuum, and table maintenance anyone may run. Any other commit after the last refresh
# changed rows the refresh does not know of (a DELETE, an UPDATE, a RESTORE by hand).
ROWS_KEPT_BY = frozenset(
    {
        "OPTIMIZE",
        "VACUUM START",
        "VACUUM END",
        "SET TBLPROPERTIES",
        "UNSET TBLPROPERTIES",
        "REORG",
        "ADD CONSTRAINT",
        "DROP CONSTRAINT",
        "UPGRADE PROTOCOL",
        "CHANGE COLUMN",
    }
)


def encode(metadata: dict) -> str:
    return json.dumps(metadata, sort_keys=True)


def newest_refresh(commits: Iterable[tuple], read_version: int) -> Optional[dict]:
    """From commits newest first as (version, timestamp ms, operation, refresh metadata or None):
    the newest refresh's metadata with `storage_version`, `committed_at_ms`, `read_version` (the
    storage version the refresh reads and commits against) and `foreign_commits` (the commits
    after it that changed rows: {version, operation}, oldest first). None when no commit of the
    ones given carries refresh metadata."""
    foreign: list[dict] = []
    for version, timestamp, operation, raw in commits:
        if version > read_version:
            continue
        if raw:
            meta = json.loads(raw)
            meta["storage_version"] = version
            meta["committed_at_ms"] = timestamp
            meta["read_version"] = read_version
            meta["foreign_commits"] = foreign[::-1]
            return meta
        if str(operation or "?").upper() not in ROWS_KEPT_BY:
            foreign.append({"version": version, "operation": str(operation or "?")})
    return None


def refresh_commits(commits: Iterable[tuple]) -> list:
    """From commits as (version, timestamp ms, operation, refresh metadata or None, the commit's
    operation metrics or None), in any order: every refresh commit's metadata, oldest first, with
    `storage_version`, `committed_at_ms` and `written` (commit_counts; the refresh history,
    runtime/history.py)."""
    out = []
    for version, timestamp, _operation, raw, metrics in commits:
        if not raw:
            continue
        meta = json.loads(raw)
        meta["storage_version"] = int(version)
        meta["committed_at_ms"] = timestamp
        meta[WRITTEN] = commit_counts(metrics, meta.get(WRITTEN))
        out.append(meta)
    return sorted(out, key=lambda m: m["storage_version"])


# What a refresh commit did to the stored rows and files. A commit the writer counts itself
# (a MERGE, Spark's writes) says so in its operation metrics; one the dbt process assembles from
# files the executors wrote (delta-rs' create_write_transaction records no metrics) carries the
# counts in its own metadata under WRITTEN, with these names.
WRITTEN = "written"
COUNTS = ("rows_inserted", "rows_updated", "rows_deleted", "rows_written", "files_added", "files_removed")
# Each count's name among the operation metrics of delta-rs (snake case) and of Delta in Spark
# (camel case). rows_written counts every row written to new files: a full refresh's result, or
# a MERGE's changed rows with the unchanged rows of the files it rewrote (copy-on-write).
_METRICS = {
    "rows_inserted": ("num_target_rows_inserted", "numTargetRowsInserted"),
    "rows_updated": ("num_target_rows_updated", "numTargetRowsUpdated"),
    "rows_deleted": ("num_target_rows_deleted", "numTargetRowsDeleted", "numDeletedRows"),
    "rows_written": ("num_output_rows", "num_added_rows", "numOutputRows"),
    "files_added": ("num_target_files_added", "num_added_files", "numTargetFilesAdded", "numFiles", "numAddedFiles"),
    "files_removed": ("num_target_files_removed", "num_removed_files", "numTargetFilesRemoved", "numRemovedFiles"),
}


def with_written(metadata: dict, **counts: int) -> dict:
    """`metadata` with what its commit does to the stored rows and files (WRITTEN, named as in
    COUNTS), for a commit whose writer does not count them: one the dbt process assembles from
    files the executors wrote, or one that moves the offsets alone (an append's metrics are of
    rows, not of the change)."""
    return {**metadata, WRITTEN: counts}


def with_inserts_only(metadata: dict, rows: int = 0) -> dict:
    """`metadata` for a commit that only inserts `rows` stored rows (0: it moves the offsets
    alone), which an append's metrics count as rows written, not as the change's."""
    return with_written(metadata, rows_inserted=rows, rows_updated=0, rows_deleted=0)


def commit_counts(metrics: Optional[dict], written: Optional[dict] = None) -> dict:
    """{count: whole number} of COUNTS that the commit's operation `metrics` ({name: value},
    values as numbers or text) or our own `written` counts give (ours where both do); the
    others left out."""
    out: dict = {}
    metrics = metrics if isinstance(metrics, dict) else {}
    for count, names in _METRICS.items():
        for name in names:
            value = metrics.get(name)
            if value is not None and str(value).lstrip("-").isdigit():
                out[count] = int(value)
                break
    for count in COUNTS:
        value = written.get(count) if isinstance(written, dict) else None
        if isinstance(value, int):
            out[count] = value
    return out
