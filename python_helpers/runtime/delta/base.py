"""The one interface between a refresh and Delta Lake.

A refresh talks to Spark through a connection (runtime/connections/) and to Delta through a
Delta engine built on that connection. Everything the refresh does with Delta is listed here:
pin a source's version and read what it is (id, schema, change feed, features); bind the
relations the delta SQL reads (the change between two versions, a snapshot, a snapshot
restricted to keys); read the stored result's metadata (offsets, fingerprint, analysis); write
a full result, MERGE the change of the result, or move the offsets alone, each in one commit
that carries the offsets; keep the stored result tidy; and publish what readers see.

Two implementations: `embedded` (runtime/delta/embedded/: the `deltalake` package in the dbt
process, Spark reading the parquet files of pinned versions, catalog views over generation
directories) and `spark` (runtime/delta/spark/: Delta Lake SQL inside Spark, the stored result
a Delta table in the catalog). `choose.py` picks one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol

import pyarrow as pa
from sqlglot import exp

from python_helpers.runtime.connections.base import Connection

if TYPE_CHECKING:
    from python_helpers.dvm.sqlgen import Context

Log = Callable[[str, str], None]

# The table property that turns on a Delta table's change data feed.
CDF_PROPERTY = "delta.enableChangeDataFeed"


class ConcurrentCommit(Exception):
    """Another writer committed to the stored result after the version this refresh read."""


class StoredRowsMissing(Exception):
    """A change takes rows from tuples the stored result does not hold: the stored result and
    the sources no longer agree, and the change cannot be applied (a full refresh can)."""


@dataclass
class TableState:
    """A Delta table pinned at one version."""

    path: str  # where it is: a storage location (or, for the spark engine, a catalog name)
    version: int
    table_id: str
    cdf_enabled: bool
    arrow_schema: pa.Schema
    partition_columns: list
    unreadable_features: list  # table features this engine cannot read correctly
    # Spark's type of each column when the engine asked Spark (else derived from arrow_schema).
    spark_types: Optional[dict] = None


@dataclass
class Merged:
    """What applying a change to the stored result did (rows of the stored table)."""

    rows: int  # merge rows computed (0: the change cancelled out)
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    files_rewritten: int = 0  # stored data files the commit replaced
    by_executors: bool = False  # the executors rewrote them (embedded engine, large results)


class Bindings(Protocol):
    """The relations one refresh's SQL reads, bound for this engine (names unique to the refresh,
    dropped by close). Counters for the result: change_counts, files_read, files_skipped,
    page_filtered, filtered_here, key_reads."""

    change_counts: dict
    files_read: int
    files_skipped: int
    page_filtered: int
    filtered_here: int
    key_reads: int

    def count_changes(self) -> dict:
        """relation -> change rows of every moved source, before reading them (raises
        ChangesUnavailable when the consumed versions can no longer be read)."""

    def load_changes(self) -> set:
        """Bind every moved source's change; the relations whose changes do not cancel out."""

    def context(self, changed: set) -> "Context":
        """The DVM's view of the bound relations."""

    def snapshot(self, relation: str, version: str) -> exp.Table:
        """A source at its `old` or `new` pinned version."""

    def stored(self, target: str, version: int) -> tuple[exp.Table, dict]:
        """The stored result at `version` as a relation, and its columns' Spark types."""

    def read_bytes(self) -> dict:
        """bound relation name -> bytes of data it reads (the read estimate of `auto`)."""

    def full_read_bytes(self) -> Optional[int]:
        """Bytes a rebuild reads: every source once at its new version (None: unknown)."""

    def scan_settings(self) -> Any:
        """A context manager: the session settings the bound reads need while a query runs."""

    def close(self) -> None: ...


class DeltaEngine(Protocol):
    """How a refresh reads and writes Delta (see the module's text)."""

    name: str  # "embedded" | "spark"
    conn: Connection
    # Whether a result whose rows are not met by one integer or string column (a bag, a key of
    # other columns) keeps a row id: the spark engine names a small change's stored rows by one
    # column (REPLACE WHERE <column> IN (...): Delta hands that predicate to the table as filters
    # of single columns, which neither a struct of columns nor a cast of one is); the embedded
    # engine meets rows by their own columns.
    keeps_row_ids: bool

    def close(self) -> None:
        """End what the engine opened for the refresh (a session of its own)."""

    # Where things are.
    def stored_location(self, schema: str, identifier: str) -> str:
        """Where a stream table's stored result lives."""

    def source_location(self, relation: str, overrides: dict) -> str:
        """Where the source `schema.table` is: the dbt source's `delta_path`, else the managed path."""

    def is_delta(self, location: str) -> bool: ...

    def stream_tables(self, schema: str) -> list:
        """Names of the stream tables whose stored results live in `schema`."""

    # Sources.
    def table_state(self, location: str, version: Optional[int] = None) -> Optional[TableState]:
        """The Delta table at `location` pinned at `version` (its newest when None); None when
        there is no Delta table."""

    def commit_digest(self, location: str, version: int) -> Optional[str]:
        """A digest of the commit of `version` (None when the log no longer holds it): another
        digest at the same version means the log was replaced."""

    def row_count(self, location: str, version: int) -> Optional[int]:
        """Rows of the table at `version` from its statistics (None: not known without a scan)."""

    # One refresh's reads.
    def bindings(self, pinned: dict, old_versions: dict, columns: dict, model: str) -> Bindings: ...

    # The stored result.
    def refresh_commits(self, target: str) -> list:
        """Every refresh commit still in the stored result's log, oldest first: its metadata with
        `storage_version` and `committed_at_ms` (metadata.refresh_commits)."""
        ...

    def read_metadata(self, target: str) -> Optional[dict]:
        """The newest refresh commit's metadata (storage.py's fields: offsets, fingerprint, ...),
        with `read_version` and `foreign_commits`; None when there is no stored result."""

    def stored_version(self, target: str) -> Optional[int]: ...

    def write_full(
        self, target: str, sql: str, names: list, metadata: dict, read_version: Optional[int], phases: Any
    ) -> int:
        """Replace the stored result by the rows of `sql` (columns renamed to `names`) in one
        commit with `metadata`; rows written. Raises ConcurrentCommit when another commit landed
        since `read_version` (None: the refresh found no stored result). `phases` times the
        parts (compute, write)."""

    def looks_up_tuples(self, target: str, read_version: int) -> bool:
        """Whether `merge` looks up the stored rows of a bag's losing tuples itself
        (Context.engine_looks_up): the refresh then sends a bag stored as its rows come as its
        consolidated change (`resolve`)."""

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
        """Apply the merge rows of `sql` (`columns`; their actions: dvm/merge_actions.py, whose
        INSERT only a bag without row ids asks for: only where keeps_row_ids is False) to the
        stored result in one commit with `metadata`, each meeting its stored row
        by the `match` columns (the row id, or a declared key's columns: NULL meets NULL;
        StoredResult.match_columns); with no `sql`
        (the change cancelled out) the commit moves the offsets alone. Raises ConcurrentCommit
        as write_full does. `phases` times the parts (delta, merge); `change_rows`: the source
        change rows the refresh read (how it writes may depend on the size). With `resolve`,
        `sql` gives a bag's consolidated change (its columns and __dvm_w), whose MERGE rows the
        engine resolves against the stored rows (looks_up_tuples)."""

    def tidy(self, target: str, retention_hours: float, log: Log, model: str) -> bool:
        """Compaction and vacuum when due; never fails a refresh (logs instead). Whether it did."""

    # What readers see.
    def publish(self, request: Any, plan: Any, target: str, view_sql: Callable, log: Log) -> None:
        """The model's name (and, where needed, each source's name) readable in the catalog at the
        versions this refresh committed."""

    def check_publishable(self, request: Any, plan: Any) -> None:
        """Before any storage commit: raise (a StreamTableError naming the view and the fix) when
        publish could not show this refresh's source versions, so rows never move without them."""

    def up_to_date(self, request: Any, plan: Any, target: str) -> bool:
        """Does what readers see show the newest stored version and the pinned sources?"""
