"""What each stream table of a schema reflects, and how far its sources have moved since.

Read from the Delta logs only (the stored results' commit metadata and the sources' current
versions): no Spark job, nothing written. `dbt run-operation stream_table_status` prints it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Optional

from python_helpers.runtime.connections.base import as_connection
from python_helpers.runtime.delta.base import DeltaEngine
from python_helpers.runtime.delta.choose import delta_engine
from python_helpers.runtime.refresh import costs


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
    # the last refreshes, oldest first: {mode, reason, change_rows, seconds, ...} (refresh/costs.py)
    recent: list = field(default_factory=list)

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
            "recent_refreshes": [
                {k: e.get(k) for k in ("mode", "reason", "change_rows", "seconds", "started_ms")} for e in self.recent
            ],
        }


def status_of(delta: DeltaEngine, schema: str, name: str) -> Optional[StreamTableStatus]:
    meta = delta.read_metadata(delta.stored_location(schema, name))
    if meta is None:
        return None  # a stored result without a refresh commit (a build killed before its first commit)
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
            source = delta.table_state(offset["path"])
            current = source.version if source is not None else None
        except Exception:  # noqa: BLE001 - reported as unknown, the status never fails on one source
            current = None
        sources.append(SourceLag(relation, int(offset["version"]), current))
    return StreamTableStatus(
        name,
        meta.get("model", name),
        meta.get("mode", "?"),
        when,
        meta["storage_version"],
        sources,
        costs.completed(meta),
    )


def schema_status(spark, schema: str, engine: str = "auto") -> list:
    """The status of every stream table of `schema` (`spark`: a SparkSession or a connection;
    `engine`: the profile's Delta engine)."""
    delta = delta_engine(as_connection(spark), engine, f"stream_table_status({schema})")
    out = []
    for name in delta.stream_tables(schema):
        status = status_of(delta, schema, name)
        if status is not None:
            out.append(status)
    return out


def format_status(statuses: list, schema: str) -> str:
    if not statuses:
        return f"no stream tables in schema {schema}"
    rows = [
        [
            "stream table",
            "last refresh",
            "at (UTC)",
            "commits behind",
            "last refreshes (s)",
            "sources (consumed -> current version)",
        ]
    ]
    for s in statuses:
        behind = "?" if s.commits_behind is None else str(s.commits_behind)
        sources = ", ".join(
            f"{x.relation} v{x.consumed_version}->" + ("?" if x.current_version is None else f"v{x.current_version}")
            for x in s.sources
        )
        rows.append([f"{schema}.{s.name}", s.mode, s.refreshed_at or "?", behind, _recent(s.recent), sources])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * len(rows[0][-1]))
    return "\n".join(lines)


def _recent(entries: list, last: int = 4) -> str:
    """The last refreshes, oldest first: 'F 4.3 D 1.2 D ?' (full / differential, seconds)."""
    shown = []
    for e in entries[-last:]:
        seconds = e.get("seconds")
        shown.append(("F" if e.get("mode") == "full" else "D") + " " + ("?" if seconds is None else f"{seconds:.1f}"))
    return " ".join(shown) or "-"
