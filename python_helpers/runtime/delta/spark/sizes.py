"""The stored result's size from its commit history, without a DESCRIBE DETAIL.

Whether a small change reads the stored rows through their row ids depends on the stored
result's size (runtime/refresh/differential.py). DESCRIBE DETAIL answers it with a Spark job over
the table's whole state (about 1 s even for a small table); the refresh reads the newest commits
anyway (DESCRIBE HISTORY, for its metadata), and Delta's operation metrics say how many bytes each
commit wrote and removed. From the newest full write on, the size is their sum. Any commit whose
effect the metrics do not tell (an unknown operation, a missing metric, no full write among the
commits read) makes the answer None: the caller asks DESCRIBE DETAIL then. It is an estimate
(it decides how a change reads the stored rows, never what a refresh writes): a replace by row
ids that rewrites a file instead of marking its rows reports the rewritten file as written but
not as removed, so the size can come out larger than it is until the next full write.
"""

from __future__ import annotations

from typing import Optional

# Commits that write the whole table: the size is what they wrote.
_WHOLE = {
    "CREATE OR REPLACE TABLE AS SELECT",
    "CREATE TABLE AS SELECT",
    "REPLACE TABLE AS SELECT",
}
# Commits that add and remove files: (bytes added, bytes removed) metrics.
_CHANGES = {
    "MERGE": ("numTargetBytesAdded", "numTargetBytesRemoved"),
    "OPTIMIZE": ("numAddedBytes", "numRemovedBytes"),
    "DELETE": ("numAddedBytes", "numRemovedBytes"),
    "UPDATE": ("numAddedBytes", "numRemovedBytes"),
}
# Commits that change no data file.
_NO_FILES = {"VACUUM START", "VACUUM END", "SET TBLPROPERTIES", "UNSET TBLPROPERTIES"}


def size_from_history(commits: list) -> Optional[int]:
    """The table's size in bytes after the newest of `commits` (DESCRIBE HISTORY records, any
    order), or None when they cannot tell."""
    change = 0
    for commit in sorted(commits, key=lambda c: -int(c["version"])):
        operation = str(commit.get("operation") or "")
        metrics = commit.get("operationMetrics") or {}
        if not isinstance(metrics, dict):
            return None
        if operation in _WHOLE:
            written = _number(metrics.get("numOutputBytes"))
            return None if written is None else max(written + change, 0)
        if operation in _NO_FILES:
            continue
        if operation == "WRITE":
            parameters = commit.get("operationParameters") or {}
            mode = str(parameters.get("mode", "")).strip('"')
            written = _number(metrics.get("numOutputBytes", "0"))
            if written is not None and mode == "Append":
                change += written
                continue
            # A replace of some rows (a differential commit by row ids: replaceWhere).
            removed = _number(metrics.get("numRemovedBytes", "0"))
            if written is None or removed is None or mode != "Overwrite" or not parameters.get("predicate"):
                return None
            change += written - removed
            continue
        if operation not in _CHANGES:
            return None
        added, removed = (_number(metrics.get(m)) for m in _CHANGES[operation])
        if added is None or removed is None:
            return None
        change += added - removed
    return None


def _number(value) -> Optional[int]:
    try:
        return int(str(value).strip('"'))
    except (TypeError, ValueError):
        return None
