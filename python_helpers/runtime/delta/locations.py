"""Where Delta tables live, for both engines: sources at Spark's managed-table path
`<spark.sql.warehouse.dir>/<schema>.db/<table>` unless the dbt source's `delta_path` says
otherwise, stored results beside the managed tables of their schema."""

from __future__ import annotations

from python_helpers.errors import StreamTableError
from python_helpers.runtime import paths
from python_helpers.runtime.connections.base import Connection, as_connection

# Stored results of a schema: <warehouse>/<schema>.db/__dvm_stream_tables/<model>.
STORAGE_DIR = "__dvm_stream_tables"


def warehouse_dir(conn: Connection) -> str:
    """spark.sql.warehouse.dir: a local path (absolute) or a storage URI, kept a URI."""
    return paths.normalize(conn.conf("spark.sql.warehouse.dir") or "")


def schema_dir(conn: Connection, schema: str) -> str:
    """Spark's managed location of a schema (database)."""
    return paths.join(warehouse_dir(conn), f"{schema.lower()}.db")


def managed_path(conn: Connection, schema: str, table: str) -> str:
    """Spark's managed-table location, where sources and stored results live by default."""
    return paths.join(schema_dir(conn, schema), table.lower())


def storage_path(spark, schema: str, identifier: str) -> str:
    """Where a stream table's stored result lives: beside, not at, the managed-table location,
    so a model switched back to `table` (or a table of that name) never collides with it.
    `spark`: a SparkSession or a connection."""
    return paths.join(schema_dir(as_connection(spark), schema), STORAGE_DIR, identifier.lower())


def source_path(conn: Connection, relation: str, overrides: dict) -> str:
    if relation in overrides and overrides[relation]:
        return paths.normalize(overrides[relation])
    parts = relation.split(".")
    if len(parts) < 2:
        raise StreamTableError("?", f"source '{relation}' is not schema-qualified")
    return managed_path(conn, parts[-2], parts[-1])
