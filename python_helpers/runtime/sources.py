"""Find and pin the Delta sources of a stream table (embedded engine)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from python_helpers.errors import SourceMissing, StreamTableError
from python_helpers.runtime import paths
from python_helpers.runtime.delta_tables import TableState, open_table, spark_type_strings, state_of
from python_helpers.runtime.engine import Engine, as_engine


@dataclass
class PinnedSource:
    relation: str  # "schema.table" as the query names it
    path: str
    state: TableState  # pinned at v_new, the version this refresh brings the result to
    pinned_by: Optional[str] = None  # the upstream stream table whose offsets chose the version
    # A digest of the commit the last refresh consumed, as the log holds it now
    # (planning.read_consumed_commits; None: not known).
    consumed_commit: Optional[str] = None

    @property
    def spark_types(self) -> dict:
        return spark_type_strings(self.state.arrow_schema)


def warehouse_dir(engine: Engine) -> str:
    """spark.sql.warehouse.dir: a local path (absolute) or a storage URI, kept a URI."""
    return paths.normalize(engine.conf("spark.sql.warehouse.dir") or "")


def schema_dir(engine: Engine, schema: str) -> str:
    """Spark's managed location of a schema (database)."""
    return paths.join(warehouse_dir(engine), f"{schema.lower()}.db")


def managed_path(engine: Engine, schema: str, table: str) -> str:
    """Spark's managed-table location, where sources and stored results live by default."""
    return paths.join(schema_dir(engine, schema), table.lower())


STORAGE_DIR = "__dvm_stream_tables"


def storage_path(spark, schema: str, identifier: str) -> str:
    """Where a stream table's stored result lives: beside, not at, the managed-table location,
    so a model switched back to `table` (or a table of that name) never collides with it."""
    return paths.join(schema_dir(as_engine(spark), schema), STORAGE_DIR, identifier.lower())


def source_path(engine: Engine, relation: str, overrides: dict) -> str:
    if relation in overrides and overrides[relation]:
        return paths.normalize(overrides[relation])
    parts = relation.split(".")
    if len(parts) < 2:
        raise StreamTableError("?", f"source '{relation}' is not schema-qualified")
    return managed_path(engine, parts[-2], parts[-1])


def pin_sources(
    engine: Engine,
    model: str,
    relations: list,
    overrides: dict,
    versions: Optional[dict] = None,
    pinned_by: Optional[dict] = None,
) -> dict:
    """Pin every source at its latest version, all at once at the start of the refresh (or at
    `versions[relation]`: the version the upstream stream table `pinned_by[relation]` read)."""
    pinned = {}
    for relation in relations:
        try:
            path = source_path(engine, relation, overrides)
        except StreamTableError:
            raise SourceMissing(
                model,
                f"table reference '{relation}' has no schema",
                "reference sources as schema.table (dbt: {{ source('shop', 'orders') }})",
            ) from None
        table = open_table(path)
        pinned_version = (versions or {}).get(relation)
        if table is not None and pinned_version is not None:
            table = open_table(path, pinned_version)
        if table is None:
            raise SourceMissing(
                model,
                f"source {relation} is not a Delta table at {path}",
                "create it there (deltalake.write_deltalake or CREATE TABLE ... USING delta), or set "
                "meta: {delta_path: <path>} on the dbt source table",
            )
        state = state_of(table, path)
        if state.unreadable_features:
            raise SourceMissing(
                model,
                f"source {relation} uses Delta features the embedded engine cannot read: "
                f"{', '.join(state.unreadable_features)}",
                "disable them (e.g. REORG TABLE ... APPLY (PURGE) for deletion vectors, then ALTER TABLE ... SET "
                "TBLPROPERTIES ('delta.enableDeletionVectors' = false)); the spark engine that could read them is "
                "not implemented yet",
            )
        pinned[relation] = PinnedSource(relation, path, state, (pinned_by or {}).get(relation))
    return pinned
