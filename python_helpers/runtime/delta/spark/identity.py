"""What a refresh needs of a source's Delta metadata (its table id, change feed setting,
partition columns) without a DESCRIBE DETAIL each time.

DESCRIBE DETAIL computes the table's size and file count, which needs the whole state of the
table: Spark jobs over its log, 1-2 s per source per refresh where the writer leaves no checksum
files (delta-rs, and so every source our tests and benchmarks write). The id of a table changes
only when the table is made anew (a new log, or CREATE/REPLACE in the same log: Delta gives a
replaced table a new id), and its properties only by statements that set them. DESCRIBE HISTORY,
read at every pin anyway, shows both: so the answer is remembered per location for this process
with the newest commit seen then, and reused when the history still holds that commit unchanged
(same version, same digest) and every commit after it is one that keeps id and properties
(KEEPS_METADATA: appends, deletes, updates, merges, compaction, vacuum). Anything else (first
pin in this process, more than the history's length of commits since, a replace, a property set,
an overwrite) asks DESCRIBE DETAIL again.

Each `dbt run` is a new process, so the stored result's metadata carries the same memory across
runs: every offset records the source's id, change-feed setting and partition columns with the
digest of the commit consumed, and `recall` takes them as if seen in this process (the same rule
then decides whether they still hold). So from the first DESCRIBE DETAIL on, a source that keeps
moving by such commits is never described again: the invariant is KEEPS_METADATA itself (no
operation in it may give a table a new id or change its change-feed setting). A wrong answer
about the change feed fails the refresh (table_changes refuses), it cannot change rows.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional

from python_helpers.runtime.delta.base import CDF_PROPERTY

# Operations (DESCRIBE HISTORY's `operation`) that change neither a table's id nor its metadata.
KEEPS_METADATA = frozenset(
    {"WRITE", "MERGE", "DELETE", "UPDATE", "STREAMING UPDATE", "OPTIMIZE", "VACUUM START", "VACUUM END"}
)


@dataclass(frozen=True)
class Identity:
    table_id: str
    properties: dict
    partition_columns: list


@dataclass(frozen=True)
class _Seen:
    identity: Identity
    version: int  # the newest commit when it was read
    digest: str


_seen: dict[str, _Seen] = {}
_lock = threading.Lock()


def digest(commit: dict) -> str:
    """A commit as DESCRIBE HISTORY shows it, in a few scalars (every connection method prints
    them alike: a Thrift server returns the parameter maps as text)."""
    what = [millis(commit.get("timestamp")), commit.get("operation"), commit.get("readVersion")]
    return hashlib.md5(json.dumps(what, default=str).encode()).hexdigest()


def millis(timestamp: Any) -> Optional[int]:
    # Truncated, as the digests recorded in stored results' metadata were made.
    if timestamp is not None and hasattr(timestamp, "timestamp"):
        return int(timestamp.timestamp() * 1000)
    return None


_PREDICATE_KEY = re.compile(r"[{,]\s*\"?predicate\"?\s*(->|:)")


def _keeps_metadata(commit: dict) -> bool:
    if commit.get("operation") not in KEEPS_METADATA:
        return False
    parameters = commit.get("operationParameters") or {}
    # An overwrite may replace the schema and its properties with it: read them again. Not one
    # with a predicate (REPLACE WHERE, as the spark engine writes small changes): Delta refuses
    # to overwrite the schema there. A Thrift server prints the parameters as text.
    if isinstance(parameters, dict):
        mode, replaces_where = str(parameters.get("mode", "")), "predicate" in parameters
    else:  # e.g. `{mode -> Overwrite, predicate -> [...]}` or its JSON form: the key, not a column name
        mode, replaces_where = str(parameters), _PREDICATE_KEY.search(str(parameters)) is not None
    return "overwrite" not in mode.lower() or replaces_where


def _still_holds(seen: Optional[_Seen], by_version: dict) -> bool:
    """The history holds the commit seen last time, unchanged, and only commits after it that
    keep the table's id and properties."""
    if seen is None or seen.version not in by_version or digest(by_version[seen.version]) != seen.digest:
        return False
    return all(_keeps_metadata(c) for v, c in by_version.items() if v > seen.version)


def recall(offsets: Optional[dict]) -> None:
    """Take a stored result's offsets as seen: each source's id, change-feed setting and
    partition columns at the commit the last refresh consumed (offsets written before these
    fields were recorded are passed over). A newer memory of this process is kept."""
    for offset in (offsets or {}).values():
        if not isinstance(offset, dict) or offset.get("commit") is None:
            continue
        if not all(k in offset for k in ("path", "table_id", "version", "cdf", "partition_columns")):
            continue
        known = Identity(
            str(offset["table_id"]),
            {CDF_PROPERTY: "true" if offset["cdf"] else "false"},
            list(offset["partition_columns"]),
        )
        seen = _Seen(known, int(offset["version"]), str(offset["commit"]))
        with _lock:
            mine = _seen.get(offset["path"])
            if mine is None or mine.version < seen.version:
                _seen[offset["path"]] = seen


def seen_version(location: str) -> Optional[int]:
    """The commit the remembered identity of `location` was seen at (None: nothing remembered)."""
    with _lock:
        seen = _seen.get(location)
    return None if seen is None else seen.version


def of(location: str, recent: list, detail: Callable[[], Optional[dict]]) -> Optional[Identity]:
    """The identity of the table at `location` whose newest commits are `recent` (DESCRIBE
    HISTORY rows, newest first or not); `detail` runs DESCRIBE DETAIL (None: not a Delta table)."""
    by_version = {int(c["version"]): c for c in recent}
    newest = max(by_version)
    with _lock:
        seen = _seen.get(location)
    if seen is not None and _still_holds(seen, by_version):
        found = seen.identity
    else:
        answer = detail()
        if answer is None:
            return None
        found = Identity(
            str(answer.get("id")), dict(answer.get("properties") or {}), list(answer.get("partitionColumns") or [])
        )
    with _lock:
        _seen[location] = _Seen(found, newest, digest(by_version[newest]))
    return found
