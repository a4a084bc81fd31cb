"""What a refresh is asked and what it answers: plain data, importable without Spark or the refresh engine.

The dbt adapter builds a RefreshRequest per model and reports the RefreshResult; `api.py` is the
call between them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

# The engine's progress and reasons: log(level, text), level "info", "warn" or "fallback" (a full
# refresh the user did not ask for).
Log = Callable[[str, str], None]

REFRESH_MODES = ("auto", "differential", "full")
ENGINES = ("auto", "embedded", "spark")
DEFAULT_AUTO_FULL_THRESHOLD = 0.2


@dataclass
class RefreshRequest:
    """One refresh of one stream table.

    `sql` is the model's compiled SELECT; its table references are `schema.table` names of
    Delta sources. `sources` maps a lower-case `schema.table` name to an explicit Delta path
    (dbt source `meta: {delta_path: ...}`); names not in it are found at Spark's managed-table
    path `<spark.sql.warehouse.dir>/<schema>.db/<table>`.
    """

    model: str
    schema: str
    identifier: str
    sql: str
    refresh_mode: str = "auto"
    full_refresh: bool = False
    sources: dict = field(default_factory=dict)
    engine: str = "auto"  # the Delta engine: auto | embedded | spark (the profile's `engine`)
    # Config that shapes the stored result; a change of it forces a full rebuild.
    shaping_config: dict = field(default_factory=dict)
    # `auto` refreshes in full when the changed rows of a source exceed this fraction of its rows
    # (a full refresh is then cheaper: the change-rate sweep in the README's Performance section). 0 disables.
    auto_full_threshold: float = DEFAULT_AUTO_FULL_THRESHOLD
    # `auto` refreshes in full when the model's own recent differential refreshes of a change this
    # size took longer than its recent full refreshes (runtime/refresh/auto.py). False: never.
    auto_from_history: bool = True
    # The dbt invocation that runs the refresh (recorded in its history entry), when dbt runs it.
    invocation_id: Optional[str] = None
    # Output columns the model declares unique (dbt's `unique_key`): a bag result is then stored
    # one row per key, built without grouping by every column and refreshed without reading the
    # stored rows (dvm/stored_result.py, KeyedBagResult). Part of the fingerprint.
    unique_key: list = field(default_factory=list)
    # Recompute in full after this many differential refreshes when the result holds algebraic
    # aggregates over floating point (SUM/AVG/VAR of DOUBLE), so rounding drift cannot pile up.
    # 0 (the default) never does.
    float_recompute_every: int = 0
    # Old versions of the stored result are vacuumed once older than this (hours; Delta's default).
    retention_hours: float = 168.0
    # The caller owns the name `schema.identifier` (dbt does, for a model's relation): a view of
    # that name that this project did not create is taken over instead of refused.
    take_over_relation: bool = False
    # The model's view as dbt's relation cache describes it (`show table extended` information,
    # read at the start of the run), or None: a refresh with nothing to do checks its view's text
    # against it instead of asking the catalog again.
    catalog_information: Optional[str] = None
    # dbt's persisted docs: {"relation": the view's comment or None, "columns": {name: comment}}.
    docs: dict = field(default_factory=dict)
    # An enforced dbt contract: [(column name, data type), ...] the query's output must match.
    contract: Optional[list] = None

    def shaping(self) -> dict:
        """What shapes the stored result (its fingerprint): the shaping config and the key."""
        if not self.unique_key:
            return dict(self.shaping_config)
        return {**self.shaping_config, "unique_key": repr([k.lower() for k in self.unique_key])}


@dataclass
class RefreshResult:
    model: str
    mode: str  # "full" | "differential"
    rows_changed: int  # rows of the stored result inserted + updated + deleted
    seconds: float
    reason: Optional[str] = None  # why this refresh ran in full (None for differential)
    skipped: bool = False  # differential with no source change: nothing read, nothing written
    source_versions: dict = field(default_factory=dict)  # relation -> version refreshed to
    phases: dict = field(default_factory=dict)  # phase -> seconds (plan, changes, delta, merge, publish, ...)
    # What the refresh read: change_rows per source, files_read / files_skipped of snapshots
    # narrowed by the Delta log's statistics.
    counters: dict = field(default_factory=dict)
    engine: str = "embedded"  # the Delta engine that ran it (runtime/delta/choose.py)

    @property
    def message(self) -> str:
        text = f"{self.mode} refresh, {self.rows_changed} rows changed in {self.seconds:.2f}s"
        if self.skipped:
            text = f"{self.mode} refresh, no source changed ({self.seconds:.2f}s)"
        if self.reason:
            text += f" ({self.reason})"
        return text
