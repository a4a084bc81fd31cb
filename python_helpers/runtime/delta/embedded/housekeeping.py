"""Keeping a stream table's storage from growing without end.

* Old versions of the stored result: data files no version within `retention_hours` (model
  config, default 168 = 7 days, Delta's own default) still needs are vacuumed, and the log is
  checkpointed and trimmed, every VACUUM_EVERY commits. Readers do not need those files (the
  published generations hold links to what they read); a downstream stream table that has not
  refreshed for longer than the retention finds the change it missed vacuumed and rebuilds in
  full, saying so.
* Files of killed writes (a full refresh's `full-<id>/` directory, a MERGE's rewrites) that no
  commit names: the same vacuum, in full mode, once they are older than the retention.
* Published generations and leftovers of killed refreshes: `generations.prune`, at every
  publish.
A failure here never fails a refresh whose result is already committed and published: it is
logged, and the next refresh tries again.
"""

from __future__ import annotations

from typing import Callable

from python_helpers.runtime import paths
from python_helpers.runtime.delta.embedded.tables import open_table, table_at
from python_helpers.runtime.refresh import steps

DEFAULT_RETENTION_HOURS = 168.0
VACUUM_EVERY = 20  # commits between two vacuums of a stored result


def tidy(target: str, retention_hours: float, log: Callable[[str, str], None], model: str) -> bool:
    """Vacuum the stored result when VACUUM_EVERY commits passed since the last vacuum (or since
    it was created); returns whether it did."""
    table = open_table(target)
    if table is None or table.version() + 1 < VACUUM_EVERY:
        return False
    recent = table.history(VACUUM_EVERY)
    if len(recent) < VACUUM_EVERY or any(str(c.get("operation", "")).startswith("VACUUM") for c in recent):
        return False
    steps.reached("vacuuming")
    try:
        # Full mode: also files no commit names (a killed full refresh's directory, a killed
        # MERGE's rewrites) once older than the retention, which is never under an hour.
        table.vacuum(retention_hours=int(retention_hours), enforce_retention_duration=False, dry_run=False, full=True)
        table = table_at(target)
        table.create_checkpoint()
        table.cleanup_metadata()
    except Exception as err:  # noqa: BLE001 - tidying is retried by the next refresh
        log(
            "warn",
            f"{model}: vacuum of {paths.basename(target)} failed ({type(err).__name__}: "
            f"{str(err).splitlines()[0][:200]}); the next refresh tries again",
        )
        return False
    steps.reached("vacuumed")
    return True
