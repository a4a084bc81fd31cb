"""The Delta Lake SQL the spark engine sends, built as text around sqlglot-rendered queries.

Delta's statements (DESCRIBE HISTORY, table_changes_by_path, MERGE, VACUUM) name a table by its
path: delta.`<path>`. Paths are quoted as identifiers (back-quotes doubled) and as string
literals (backslashes and quotes escaped) where a function takes them.
"""

from __future__ import annotations

from typing import Optional

from python_helpers.dvm.merge_actions import ACTION, DELETE, UPSERT
from python_helpers.dvm.sqlgen import render
from python_helpers.dvm.stored_reads import matches
from python_helpers.runtime.catalog.views import quote

# Commit metadata and idempotent writes (Delta's session settings, read at commit time).
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
# A replaceWhere on a data column (here the row id) is Delta's default; set for the statement in
# case a cluster turned it off.
REPLACE_WHERE_DATA_COLUMNS = "spark.databricks.delta.replaceWhere.dataColumns.enabled"
# Delta checks every row a replaceWhere inserts against its predicate, at a cost that grows with
# the keys times the rows (32 k keys 29-33 s on the 60 M-row fact, 12.6 s unchecked). The
# rows replace_keys inserts are, by construction, rows of the listed keys: the check is off for
# that statement.
REPLACE_WHERE_CONSTRAINT_CHECK = "spark.databricks.delta.replaceWhere.constraintCheck.enabled"
# A vacuum shorter than Delta's 7 days is refused unless this check is off (our own tables only).
RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
# VACUUM lists the table's directories in as many tasks as this says (Spark's default 10,000:
# 50 s for a table of three files on two cores); a stored result has a handful of directories.
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
VACUUM_LISTING_TASKS = "8"
# The stored result: a change feed (stream tables over stream tables read it) and deletion
# vectors (a MERGE marks the rows it removes instead of rewriting their files).
STORED_PROPERTIES = {
    "delta.enableChangeDataFeed": "true",
    "delta.enableDeletionVectors": "true",
}


def string(value: str) -> str:
    """A Spark SQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def by_path(path: str) -> str:
    """The Delta table at `path`: delta.`<path>`."""
    return "delta." + quote(path)


def at_version(path: str, version: int) -> str:
    return f"{by_path(path)} VERSION AS OF {int(version)}"


def history(path: str, limit: Optional[int] = None) -> str:
    return f"DESCRIBE HISTORY {by_path(path)}" + (f" LIMIT {int(limit)}" if limit else "")


def detail(path: str) -> str:
    return f"DESCRIBE DETAIL {by_path(path)}"


def changes(path: str, start: int, end: int) -> str:
    """The change data feed of versions start..end (inclusive) as a FROM item."""
    return f"table_changes_by_path({string(path)}, {int(start)}, {int(end)})"


def properties(props: dict) -> str:
    return ", ".join(f"{string(k)} = {string(v)}" for k, v in props.items())


def replace_table(path: str, query: str, names: list) -> str:
    """Replace the table at `path` (created when missing) by `query`'s rows, its columns named
    `names` positionally (a query's own names may repeat)."""
    aliases = ", ".join(quote(n) for n in names)
    return (
        f"CREATE OR REPLACE TABLE {by_path(path)} USING delta TBLPROPERTIES ({properties(STORED_PROPERTIES)}) "
        f"AS SELECT * FROM ({query}) AS __dvm_rows({aliases})"
    )


def merge(path: str, query: str, columns: list, match: list) -> str:
    """Upserts ('U') and deletes ('D') from `query` into the table at `path`, each meeting its
    stored row by the `match` columns (Delta.merge)."""
    sets = ", ".join(f"t.{quote(c)} = s.{quote(c)}" for c in columns)
    names = ", ".join(quote(c) for c in columns)
    values = ", ".join(f"s.{quote(c)}" for c in columns)
    act = quote(ACTION)
    on = render(matches(match, "t", match, "s"))
    return (
        f"MERGE INTO {by_path(path)} AS t USING ({query}) AS s ON {on} "
        f"WHEN MATCHED AND s.{act} = '{DELETE}' THEN DELETE "
        f"WHEN MATCHED AND s.{act} = '{UPSERT}' THEN UPDATE SET {sets} "
        f"WHEN NOT MATCHED AND s.{act} = '{UPSERT}' THEN INSERT ({names}) VALUES ({values})"
    )


def listable(value) -> bool:
    """A key value replace_keys lists: a string or an integer (NULL, which IN never finds, is not)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def replace_keys(path: str, rows_view: str, keys: list, columns: list, key: str) -> str:
    """The merge rows of `rows_view` (every one of whose `key` values, the row id or a keyed
    result's one integer or string key column, is in `keys`, all `listable`) applied in one
    commit without a join to the stored rows: the stored rows of those keys are deleted
    (deletion vectors: Delta scans the key column with the key set and marks the rows) and the
    upserts ('U') inserted. A key with a delete ('D') has no upsert, so it is gone after."""
    names = ", ".join(quote(c) for c in columns)
    listed = ", ".join(string(k) if isinstance(k, str) else str(int(k)) for k in keys)
    return (
        f"INSERT INTO {by_path(path)} REPLACE WHERE {quote(key)} IN ({listed}) "
        f"SELECT {names} FROM {quote(rows_view)} WHERE {quote(ACTION)} = '{UPSERT}'"
    )


def empty_append(path: str) -> str:
    """A commit that adds no rows: the offsets move, nothing else."""
    return f"INSERT INTO {by_path(path)} SELECT * FROM {by_path(path)} WHERE false"
