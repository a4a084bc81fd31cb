"""The Delta log's commits, read as files: which data files a range of versions changed.

A refresh needs, for the versions it consumes, the change data feed's *files* rather than its
rows: to count the change before reading it (the Delta log's statistics, no data read), and to
let Spark read large changes itself instead of passing them through the driver. The rules are
the Delta protocol's for the change data feed: a commit that wrote `cdc` files holds its change
rows there (with `_change_type`); a commit without them changed the table by whole files, so
its added data files are inserts and its removed data files deletes (`dataChange` true only).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc

from python_helpers.runtime import paths

LOG_DIR = "_delta_log"


class CommitMissing(Exception):
    """A commit file of the range is gone (log cleaned up)."""


@dataclass(frozen=True)
class ChangeFile:
    path: str  # absolute (local path or URI), as Spark reads it
    kind: str  # "cdc" (rows carry _change_type) | "add" (inserts) | "remove" (deletes)
    partition_values: tuple  # ((column, value string or None), ...)
    size: int
    records: Optional[int]  # rows, from the log's statistics when it has them


@dataclass
class ChangeFiles:
    files: list = field(default_factory=list)
    versions: list = field(default_factory=list)

    @property
    def known_rows(self) -> int:
        return sum(f.records or 0 for f in self.files)

    def estimated_rows(self, bytes_per_row: float) -> int:
        """Change rows: counted where the log has statistics, else estimated from file size."""
        total = 0
        for f in self.files:
            total += f.records if f.records is not None else int(f.size / max(bytes_per_row, 1.0)) + 1
        return total


def _read_text(uri: str) -> str:
    if not paths.is_uri(uri):
        try:
            with open(uri, "r", encoding="utf-8") as handle:
                return handle.read()
        except FileNotFoundError:
            raise CommitMissing(uri) from None
    import pyarrow.fs as pafs

    fs, inner = pafs.FileSystem.from_uri(paths.for_delta_rs(uri))
    try:
        with fs.open_input_stream(inner) as handle:
            return handle.read().decode("utf-8")
    except FileNotFoundError:
        raise CommitMissing(uri) from None


def commit_actions(table_path: str, version: int) -> list:
    """The actions of one commit, in log order."""
    name = paths.join(table_path, LOG_DIR, f"{version:020d}.json")
    return [json.loads(line) for line in _read_text(name).splitlines() if line.strip()]


def commit_digest(table_path: str, version: int) -> Optional[str]:
    """A digest of the commit file of `version` (None when the log no longer holds it). A Delta
    commit file is written once and never changed: another digest at the same version means
    the log was replaced (a table rewritten under the same id), not that it moved on."""
    import hashlib

    try:
        text = _read_text(paths.join(table_path, LOG_DIR, f"{version:020d}.json"))
    except CommitMissing:
        return None
    return hashlib.md5(text.encode("utf-8")).hexdigest()


def _absolute(table_path: str, relative: str) -> str:
    if "://" in relative or relative.startswith("/"):
        return paths.local(relative)
    return paths.join(table_path, *unquote(relative).split("/"))


def _records(action: dict) -> Optional[int]:
    stats = action.get("stats")
    if not stats:
        return None
    try:
        value = json.loads(stats).get("numRecords")
    except (TypeError, ValueError):
        return None
    return int(value) if value is not None else None


def _partition_key(action: dict) -> tuple:
    return tuple(sorted((action.get("partitionValues") or {}).items()))


def change_files(table_path: str, start: int, end: int) -> ChangeFiles:
    """The change data files of versions start..end (inclusive)."""
    out = ChangeFiles(versions=list(range(start, end + 1)))
    for version in out.versions:
        actions = commit_actions(table_path, version)
        cdc = [a["cdc"] for a in actions if "cdc" in a]
        # A commit written while the feed was off has no cdc files: its whole-file adds and
        # removes are then its change, which is exact (a rewritten file is all its old rows
        # deleted and all its new rows inserted), only larger.
        if cdc:
            out.files += [
                ChangeFile(_absolute(table_path, c["path"]), "cdc", _partition_key(c), int(c.get("size") or 0), None)
                for c in cdc
            ]
            continue
        for a in actions:
            for kind in ("add", "remove"):
                act = a.get(kind)
                if act is None or not act.get("dataChange", True):
                    continue
                out.files.append(
                    ChangeFile(
                        _absolute(table_path, act["path"]),
                        kind,
                        _partition_key(act),
                        int(act.get("size") or 0),
                        _records(act),
                    )
                )
    return out


def typed_partition_value(value: Optional[str], type_: pa.DataType, length: int) -> pa.Array:
    """A partition value in the log's string form as a column of `length` rows of `type_`."""
    if value is None:
        return pa.nulls(length, type_)
    if pa.types.is_timestamp(type_):
        import datetime

        # The log writes `yyyy-MM-dd HH:mm:ss[.SSSSSS]` (UTC for zoned timestamps).
        moment = datetime.datetime.fromisoformat(value.strip().replace(" ", "T").rstrip("Z"))
        if type_.tz is not None and moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.timezone.utc)
        scalar = pa.array([moment], type_)
    elif pa.types.is_binary(type_):
        scalar = pa.array([value.encode("utf-8")], type_)
    else:
        scalar = pc.cast(pa.array([value], pa.string()), type_)
    return pa.repeat(scalar[0], length) if length else pa.array([], type_)
