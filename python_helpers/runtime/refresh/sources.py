"""Find and pin the Delta sources of a stream table, through the Delta engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from python_helpers.errors import SourceMissing, StreamTableError
from python_helpers.runtime.delta.base import DeltaEngine, TableState
from python_helpers.runtime.spark_types import spark_type_strings


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
        if self.state.spark_types is not None:
            return dict(self.state.spark_types)
        return spark_type_strings(self.state.arrow_schema)


def pin_sources(
    delta: DeltaEngine,
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
            path = delta.source_location(relation, overrides)
        except StreamTableError:
            raise SourceMissing(
                model,
                f"table reference '{relation}' has no schema",
                "reference sources as schema.table (dbt: {{ source('shop', 'orders') }})",
            ) from None
        state = delta.table_state(path)
        pinned_version = (versions or {}).get(relation)
        if state is not None and pinned_version is not None:
            state = delta.table_state(path, pinned_version)
        if state is None:
            raise SourceMissing(
                model,
                f"source {relation} is not a Delta table at {path}",
                "create it there (deltalake.write_deltalake or CREATE TABLE ... USING delta), or set "
                "meta: {delta_path: <path>} on the dbt source table",
            )
        if state.unreadable_features:
            raise SourceMissing(
                model,
                f"source {relation} uses Delta features the {delta.name} engine cannot read: "
                f"{', '.join(state.unreadable_features)}",
                "use engine: spark in the profile on a Spark with Delta Lake (docs/deployment.md), or disable them "
                "(e.g. REORG TABLE ... APPLY (PURGE) for deletion vectors, then ALTER TABLE ... SET TBLPROPERTIES "
                "('delta.enableDeletionVectors' = false))",
            )
        pinned[relation] = PinnedSource(relation, path, state, (pinned_by or {}).get(relation))
    return pinned
