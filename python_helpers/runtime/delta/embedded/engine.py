"""The embedded Delta engine: the `deltalake` package (delta-rs) in the dbt process reads the
logs and commits, Spark reads the parquet files of pinned versions and computes, and readers
see catalog views over generation directories (Spark here has no Delta Lake).

The modules beside this one hold the work: tables.py (opening tables, file lists, statistics),
log.py (commit files), change_feed.py (reading a change), bindings.py (the relations of a
refresh), storage.py (the stored result's commits), bag_lookup.py (a bag's MERGE rows from its
change and the stored rows of the tuples it takes from), bag_rewrite.py (a bag's change that
takes rows, applied by rewriting the touched files with Arrow), executor_writes.py and
executor_merge.py (full and differential refreshes whose files the executors write),
publishing.py with generations.py (the views), housekeeping.py (vacuum).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from python_helpers.runtime import paths
from python_helpers.runtime.connections.base import Connection
from python_helpers.runtime.delta import base, locations
from python_helpers.runtime.delta.base import Log, Merged, TableState
from python_helpers.runtime.delta.embedded import (
    bag_lookup,
    bag_rewrite,
    change_feed,
    executor_merge,
    executor_writes,
    housekeeping,
    log,
    publishing,
    storage,
    tables,
)
from python_helpers.runtime.delta.embedded.bindings import Bindings
from python_helpers.runtime.refresh import steps


class EmbeddedDelta:
    name = "embedded"
    keeps_row_ids = False

    def __init__(self, conn: Connection):
        self.conn = conn

    def close(self) -> None:
        pass  # the connection is dbt's

    # Where things are.
    def stored_location(self, schema: str, identifier: str) -> str:
        return locations.storage_path(self.conn, schema, identifier)

    def source_location(self, relation: str, overrides: dict) -> str:
        return locations.source_path(self.conn, relation, overrides)

    def is_delta(self, location: str) -> bool:
        return tables.is_delta_table(location)

    def stream_tables(self, schema: str) -> list:
        return paths.list_directories(paths.join(locations.schema_dir(self.conn, schema), locations.STORAGE_DIR))

    # Sources.
    def table_state(self, location: str, version: Optional[int] = None) -> Optional[TableState]:
        table = tables.open_table(location, version)
        return tables.state_of(table, location) if table is not None else None

    def commit_digest(self, location: str, version: int) -> Optional[str]:
        return log.commit_digest(location, version)

    def row_count(self, location: str, version: int) -> Optional[int]:
        rows, _ = change_feed.table_stats(tables.table_at(location, version))
        return rows

    # One refresh's reads.
    def bindings(self, pinned: dict, old_versions: dict, columns: dict, model: str) -> base.Bindings:
        return Bindings(self.conn, pinned, old_versions, columns, model)

    # The stored result.
    def refresh_commits(self, target: str) -> list:
        return storage.refresh_commits(target)

    def read_metadata(self, target: str) -> Optional[dict]:
        return storage.read_metadata(target)

    def stored_version(self, target: str) -> Optional[int]:
        table = tables.open_table(target)
        return table.version() if table is not None else None

    def write_full(
        self, target: str, sql: str, names: list, metadata: dict, read_version: Optional[int], phases: Any
    ) -> int:
        # Written by the executors, committed by delta-rs: no row passes through this process.
        return executor_writes.write_full(self.conn, target, sql, names, metadata, read_version, phases)

    def looks_up_tuples(self, target: str, read_version: int) -> bool:
        # Where delta-rs applies the MERGE in this process, which reads the stored files anyway.
        return executor_merge.applies_to(target, read_version) is None

    def merge(
        self,
        target: str,
        sql: Optional[str],
        columns: list,
        match: list,
        metadata: dict,
        read_version: int,
        phases: Any,
        change_rows: Optional[int] = None,
        resolve: bool = False,
    ) -> Merged:
        large = executor_merge.applies_to(target, read_version) if sql is not None else None
        if sql is not None and large is not None:
            assert not resolve, "a bag's change is resolved here only where delta-rs applies the MERGE"
            # A large stored result: the executors rewrite the touched files, the dbt process
            # commits (no compaction in the dbt process either).
            return executor_merge.merge(self.conn, target, sql, metadata, read_version, phases, match, large)
        with phases("delta"):
            data = self.conn.arrow(sql) if sql is not None else None
        if resolve and data is not None and bag_rewrite.takes_rows(data) and not paths.is_uri(target):
            # A bag's change that takes rows: the dbt process rewrites the touched files itself
            # (bag_rewrite.py), unless its candidates are too many for it.
            try:
                with phases("merge"):
                    merged = bag_rewrite.rewrite(
                        tables.table_at(target, read_version),
                        target,
                        data,
                        list(match),
                        metadata,
                        read_version,
                        reached=steps.reached,
                    )
                steps.reached("committed")
                if storage.maybe_compact(target):
                    steps.reached("compacted")
                return merged
            except bag_rewrite.TooMany:
                pass  # the lookup and delta-rs' MERGE below
        if resolve and data is not None and data.num_rows:
            with phases("lookup"):
                table = tables.table_at(target, read_version)
                types = {f.name: f.type for f in tables.arrow_schema(table)}
                data = bag_lookup.merge_rows(lambda: tables.parquet_datasets(table, target), types, data, list(match))
        steps.reached("delta_computed")
        with phases("merge"):
            steps.reached("merging")
            if data is None or not data.num_rows:
                storage.commit_offsets_only(target, metadata, read_version)
                merged = Merged(0)
            else:
                done = storage.merge_rows(target, data, columns, match, metadata, read_version) or {}
                # What the MERGE did to the stored rows (one per group, per key, or per tuple or
                # part of one with its multiplicity): delta-rs counts them as it applies them.
                merged = Merged(
                    data.num_rows,
                    inserted=int(done.get("num_target_rows_inserted", 0)),
                    updated=int(done.get("num_target_rows_updated", 0)),
                    deleted=int(done.get("num_target_rows_deleted", 0)),
                    files_rewritten=int(done.get("num_target_files_removed", 0)),
                )
            steps.reached("committed")
            # Before publishing, so the views show the compacted version.
            if storage.maybe_compact(target):
                steps.reached("compacted")
            return merged

    def tidy(self, target: str, retention_hours: float, log: Log, model: str) -> bool:
        return housekeeping.tidy(target, retention_hours, log, model)

    # What readers see.
    def publish(self, request: Any, plan: Any, target: str, view_sql: Callable, log: Log) -> None:
        publishing.publish(self.conn, request, plan, target, view_sql, log)

    def check_publishable(self, request: Any, plan: Any) -> None:
        publishing.check_publishable(self.conn, request, plan)

    def up_to_date(self, request: Any, plan: Any, target: str) -> bool:
        return publishing.up_to_date(self.conn, request, plan, target)
