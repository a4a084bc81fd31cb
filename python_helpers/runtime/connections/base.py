"""The one interface between a refresh and Spark.

The refresh logic (planning, change reading, delta SQL, publishing) asks Spark for a handful of
things only, all listed here: run a statement, read a result's rows or Arrow table, analyse a
query's output columns without running it, bind a temporary view (over Arrow rows held by the
client, over parquet files of a Delta version, over a query), read settings and the catalog,
and classify a function. Each connection kind is one binding of this class:
`spark.SparkConnection` serves an in-process SparkSession and a Spark Connect session (the
DataFrame API, and for the in-process one its JVM); nothing outside a binding touches a
SparkSession, its JVM or its SparkContext.

Temporary views carry names unique to the refresh (`binding.Bindings`), because dbt runs
models on several threads against one session.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Optional, Protocol

import pyarrow as pa

from python_helpers.runtime import paths

# Read options of every scan of a Delta version's files (view_of_files). Parquet's dictionary
# filter tests an `IN` or `=` filter against each row group's dictionary, which it reads and
# expands first. A key column of many distinct values that a writer kept whole in a dictionary
# (delta-rs does, in row groups of a few hundred thousand rows) makes that cost seconds, and it
# cannot skip a row group that holds most of the key space: a key-restricted read of 10 M orders
# took 4-8 s with it and 0.6 s without. Row groups are still skipped by their min/max statistics.
NO_DICTIONARY_FILTER = {"parquet.filter.dictionary.enabled": "false"}

# The settings that name the metastore a session publishes to (catalog.views.catalog_key,
# in this order: the key is a hash of their values).
CATALOG_SETTINGS = (
    "spark.sql.catalogImplementation",
    "spark.hadoop.hive.metastore.uris",
    "spark.hadoop.javax.jdo.option.ConnectionURL",
)

# Settings fixed for the life of a Spark application: static SQL settings, and the Hadoop
# settings its metastore client read when it started. A refresh asks for them several times
# (the catalog's key on each publish, the warehouse on each location), and each `conf.get` is a
# round trip over Spark Connect: a session's connection reads each once (Thrift caches every
# setting it reads).
STATIC_SETTINGS = frozenset({*CATALOG_SETTINGS, "spark.sql.warehouse.dir"})

# Spark lists the files a read names before it plans it (their sizes, for splits), and past this
# many paths it lists them with a Spark job: a job of a task per path that cost 0.5-0.6 s for 39
# local files where listing them in the driver costs 0.08-0.1 s (2026-12-02). A Delta version
# names its files, so a local one is listed in the driver up to DRIVER_LISTED_FILES files;
# remote storage keeps Spark's job, whose tasks make the remote calls side by side.
LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"
SPARK_LISTING_THRESHOLD = 32  # Spark's default
DRIVER_LISTED_FILES = 10_000


def listed_in_driver(files: list[str]) -> bool:
    """Whether a read of these paths (local, or `file:`) should be listed in the driver."""
    return SPARK_LISTING_THRESHOLD < len(files) <= DRIVER_LISTED_FILES and not any(paths.is_uri(f) for f in files)


@dataclass(frozen=True)
class Computed:
    """What a materialized query's computation told of its rows (view_of_query; None: not
    known, ask)."""

    holds_rows: Optional[bool] = None
    flagged: Optional[bool] = None  # does a row hold the `flag` column TRUE


NOT_TOLD = Computed()


@dataclass(frozen=True)
class OutputColumn:
    """A column of a query's output as Spark's analysis gives it."""

    name: str
    type: str  # Spark's simpleString, e.g. `decimal(18,2)`, `array<int>`
    nullable: bool = True


@dataclass(frozen=True)
class FunctionKind:
    """What a function call is, for the operator tree (runtime/refresh/functions.py)."""

    aggregate: bool
    deterministic: bool
    pandas: bool = False  # a pandas UDAF: Spark computes it only beside other pandas UDAFs
    unclassified: bool = False  # over SQL alone a user function cannot be told apart
    # a digest of a user function's code (connections/function_code.py); None for Spark's own
    code: Optional[str] = None


class Connection(Protocol):
    """What a refresh asks of Spark."""

    kind: str  # "session" (in-process), "connect"
    # Whether Spark's optimizer folds a filter over rows the client sent (view_of_arrow's
    # `rows_name`) into the rows themselves, so that asking if any pass runs no job.
    folds_local_rows: bool

    @property
    def key(self) -> int:
        """Identifies the Spark session behind the connection (caches of published views, analysed
        snapshots and companion views are per session)."""

    @property
    def settings_key(self) -> int:
        """Identifies the session whose settings `set_conf` changes (connections/held_settings.py
        counts the blocks holding a setting per session)."""

    # Statements and results.
    def execute(self, sql: str) -> None:
        """Run a statement for its effect (DDL)."""

    def rows(self, sql: str) -> list[tuple]:
        """A (small) result's rows."""

    def records(self, sql: str) -> list[dict]:
        """A (small) result's rows by column name; also for statements no query can wrap
        (`DESCRIBE DETAIL`, `DESCRIBE HISTORY`), whose columns `output_columns` cannot analyse."""

    def arrow(self, sql: str, names: Optional[list[str]] = None) -> pa.Table:
        """A result as an Arrow table, in the dbt process (its columns renamed to `names`,
        positionally: a query's own names may repeat)."""

    def output_columns(self, sql: str) -> list[OutputColumn]:
        """The query's output columns from analysis alone (no job)."""

    # Temporary views over what the refresh binds.
    def view_of_arrow(
        self, name: str, data: pa.Table, one_partition: bool = False, rows_name: Optional[str] = None
    ) -> None:
        """Rows the client holds (a small change read by the client). `rows_name`: where the
        connection `folds_local_rows`, also bind the rows as they are (no repartition) under it."""

    def view_of_files(
        self,
        name: str,
        files: list[str],
        schema: pa.Schema,
        base_path: Optional[str] = None,
        columns: Optional[list[str]] = None,
        cache_key: Optional[tuple] = None,
    ) -> None:
        """Parquet files (paths as Spark reads them: Hadoop globs escaped) under `schema`;
        `base_path` finds hive-style partition values in directory names; `columns` projects;
        `cache_key` names an immutable set of files whose scan may be reused across refreshes."""

    def view_of_query(
        self,
        name: str,
        sql: str,
        one_partition: bool = False,
        materialize: bool = False,
        flag: Optional[str] = None,
    ) -> Computed:
        """A query; `materialize` computes it once now (read several times later) and answers
        what the computation told: whether it holds rows, and whether a row holds the boolean
        column `flag` TRUE (None: not known, ask)."""

    def drop_view(self, name: str) -> None:
        """Drop a temporary view (no error when it is gone)."""

    # Catalog and settings.
    def table_exists(self, name: str) -> bool: ...

    def table_type(self, name: str) -> Optional[str]:
        """`VIEW`, `MANAGED`, `EXTERNAL` ... or None when there is no such object."""

    def conf(self, key: str, default: Optional[str] = None) -> Optional[str]: ...

    def setting(self, key: str) -> Optional[str]:
        """A setting's effective value: the session's own, else Spark's default (None: a key
        this Spark does not know and nobody set). Every binding answers alike, so values
        recorded over one connection compare with those read over another."""

    def settings(self, keys: list[str]) -> dict:
        """{key: `setting(key)`} for several keys, in one round trip where the connection can."""

    def set_conf(self, key: str, value: Optional[str]) -> None:
        """Set a session setting (None: unset it, back to the default)."""

    def explicit_confs(self) -> dict:
        """The settings set explicitly on the session (empty when the server does not list them)."""

    def spark_version(self) -> str:
        """The version of the Spark that runs the queries, e.g. `4.1.4`."""

    # What only some connections can tell.
    def classify_function(self, name: str, arity: int) -> Optional[FunctionKind]:
        """None when Spark does not know the function."""

    def ui_url(self) -> Optional[str]:
        """The Spark UI whose REST API reports jobs (runtime/connections/metrics.py), when this side knows it."""

    def add_tag(self, tag: str) -> bool:
        """Tag the jobs this thread starts (False when the connection cannot)."""

    def remove_tag(self, tag: str) -> None: ...

    # A session of the refresh's own.
    def private(self) -> "Connection":
        """A connection on a session of its own with this one's settings, temporary views and
        functions (a clone): settings set on it (a Delta commit's metadata) are not seen by
        statements of dbt's other threads. `release()` ends it."""

    def release(self) -> None:
        """End what `private()` opened (nothing for a connection that is not a clone)."""


_CONNECTIONS: dict[int, tuple[Any, Connection]] = {}
_LOCK = threading.Lock()


def as_connection(spark_or_connection: Any) -> Connection:
    """The connection of a Spark session (one per session, so caches keyed by it hold), or the
    connection itself. Public entry points take either; everything inside takes a Connection."""
    if hasattr(spark_or_connection, "view_of_files"):
        return spark_or_connection
    with _LOCK:
        known = _CONNECTIONS.get(id(spark_or_connection))
        if known is not None and known[0] is spark_or_connection:
            return known[1]
        from python_helpers.runtime.connections.spark import SparkConnection

        conn = SparkConnection(spark_or_connection)
        _CONNECTIONS[id(spark_or_connection)] = (spark_or_connection, conn)
        return conn
