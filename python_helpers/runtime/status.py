"""What each stream table of a schema reflects, and how far its sources have moved since.

Read from the Delta logs only (the stored results' commit metadata and the sources' current
versions): no Spark job, nothing written. `dbt run-operation stream_table_status` prints it.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from typing import Optional

from python_helpers.runtime import delta_tables, paths, storage
from python_helpers.runtime.engine import Engine, as_engine
from python_helpers.runtime.sources import STORAGE_DIR, schema_dir


@dataclass
class SourceLag:
    relation: str
    consumed_version: int  # the source version the stream table reflects
    current_version: Optional[int]  # None: the source is gone or unreadable

    @property
    def commits_behind(self) -> Optional[int]:
        return None if self.current_version is None else max(0, self.current_version - self.consumed_version)


@dataclass
class StreamTableStatus:
    name: str
    model: str
    mode: str  # of the last refresh: full | differential
    refreshed_at: Optional[str]  # the last refresh commit's time, UTC, ISO 8601
    storage_version: Optional[int]
    sources: list = field(default_factory=list)

    @property
    def commits_behind(self) -> Optional[int]:
        lags = [s.commits_behind for s in self.sources]
        return None if any(v is None for v in lags) else sum(lags)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "model": self.model,
            "mode": self.mode,
            "refreshed_at": self.refreshed_at,
            "storage_version": self.storage_version,
            "commits_behind": self.commits_behind,
            "sources": [
                {
                    "relation": s.relation,
                    "consumed_version": s.consumed_version,
                    "current_version": s.current_version,
                    "commits_behind": s.commits_behind,
                }
                for s in self.sources
            ],
        }


def stream_table_names(engine: Engine, schema: str) -> list:
    root = paths.join(schema_dir(engine, schema), STORAGE_DIR)
    if paths.is_uri(root):
        import pyarrow.fs as pafs

        fs, inner = pafs.FileSystem.from_uri(paths.for_delta_rs(root))
        infos = fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)
    local = paths.local(root)
    if not os.path.isdir(local):
        return []
    return sorted(n for n in os.listdir(local) if os.path.isdir(os.path.join(local, n)) and not n.startswith("."))


def status_of(engine: Engine, schema: str, name: str) -> Optional[StreamTableStatus]:
    path = paths.join(schema_dir(engine, schema), STORAGE_DIR, name)
    meta = storage.read_metadata(path)
    if meta is None:
        return None  # a directory without a refresh commit (a build killed before its first commit)
    stamp = meta.get("committed_at_ms")
    when = (
        dt.datetime.fromtimestamp(stamp / 1000, dt.timezone.utc).isoformat(timespec="seconds")
        if stamp is not None
        else None
    )
    sources = []
    for relation, offset in sorted((meta.get("offsets") or {}).items()):
        current = None
        try:
            source = delta_tables.open_table(offset["path"])
            current = source.version() if source is not None else None
        except Exception:  # noqa: BLE001 - reported as unknown, the status never fails on one source
            current = None
        sources.append(SourceLag(relation, int(offset["version"]), current))
    return StreamTableStatus(
        name, meta.get("model", name), meta.get("mode", "?"), when, meta["storage_version"], sources
    )


def schema_status(spark, schema: str) -> list:
    """The status of every stream table of `schema` (`spark`: a SparkSession or an engine)."""
    engine = as_engine(spark)
    out = []
    for name in stream_table_names(engine, schema):
        status = status_of(engine, schema, name)
        if status is not None:
            out.append(status)
    return out


def format_status(statuses: list, schema: str) -> str:
    if not statuses:
        return f"no stream tables in schema {schema}"
    rows = [["stream table", "last refresh", "at (UTC)", "commits behind", "sources (consumed -> current version)"]]
    for s in statuses:
        behind = "?" if s.commits_behind is None else str(s.commits_behind)
        sources = ", ".join(
            f"{x.relation} v{x.consumed_version}->" + ("?" if x.current_version is None else f"v{x.current_version}")
            for x in s.sources
        )
        rows.append([f"{schema}.{s.name}", s.mode, s.refreshed_at or "?", behind, sources])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * len(rows[0][-1]))
    return "\n".join(lines)
