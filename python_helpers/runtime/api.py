"""The engine's public surface: what the dbt adapter (and tests, benchmarks) call."""

from __future__ import annotations

from typing import Optional

from python_helpers.runtime.connections.base import as_connection
from python_helpers.runtime.refresh.requests import (
    DEFAULT_AUTO_FULL_THRESHOLD,
    ENGINES,
    REFRESH_MODES,
    RefreshRequest,
    RefreshResult,
)
from python_helpers.runtime.refresh.run import Log, explain, run_refresh

__all__ = [
    "DEFAULT_AUTO_FULL_THRESHOLD",
    "ENGINES",
    "REFRESH_MODES",
    "RefreshRequest",
    "RefreshResult",
    "explain",
    "refresh_stream_table",
]


def refresh_stream_table(spark, request: RefreshRequest, log: Optional[Log] = None) -> RefreshResult:
    """Create or refresh the stream table `request.schema.request.identifier`.

    `log(level, text)` receives progress and reasons: "info", "warn", and "fallback" for a full
    refresh the user did not ask for (logged before anything is written; the callback may raise
    to stop the refresh there).
    Raises a python_helpers.errors.StreamTableError subclass on bad input.
    `spark` is a SparkSession (in-process or Spark Connect) or an conn.Connection.
    """
    return run_refresh(as_connection(spark), request, log=log)
