"""The adapter response of a stream table refresh.

dbt serialises a model's AdapterResponse with `to_dict()` into run_results.json
(`adapter_response`) and prints `str(response)` on the console line, so extra dataclass
fields here become machine-readable results of every refresh.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional

from dbt.adapters.contracts.connection import AdapterResponse


@dataclass
class StreamTableResponse(AdapterResponse):
    mode: Optional[str] = None  # "full" | "differential"
    rows_changed: Optional[int] = None  # stored result rows inserted + updated + deleted
    seconds: Optional[float] = None  # refresh time measured by the refresh
    reason: Optional[str] = None  # why the refresh ran in full
    skipped: bool = False  # differential with no source change
    source_versions: Dict[str, int] = field(default_factory=dict)
    phases: Dict[str, float] = field(default_factory=dict)  # seconds per phase of the refresh
    # change_rows (all sources), files_read / files_skipped by statistics, spark_jobs, rows_read
    counters: Dict[str, int] = field(default_factory=dict)
    engine: Optional[str] = None  # the Delta engine that ran the refresh: embedded | spark

    @classmethod
    def from_result(cls, result) -> "StreamTableResponse":
        """Build from a python_helpers RefreshResult (duck-typed: the adapter owns no engine types)."""
        return cls(
            _message=result.message,
            code=result.mode,
            rows_affected=result.rows_changed,
            mode=result.mode,
            rows_changed=result.rows_changed,
            seconds=round(float(result.seconds), 3),
            reason=result.reason,
            skipped=bool(result.skipped),
            source_versions={str(k): int(v) for k, v in (result.source_versions or {}).items()},
            phases={str(k): round(float(v), 4) for k, v in (getattr(result, "phases", None) or {}).items()},
            counters=_flat_counters(getattr(result, "counters", None) or {}),
            engine=getattr(result, "engine", None),
        )


def _flat_counters(counters: dict) -> Dict[str, int]:
    """Whole numbers only (dbt serialises the response with a strict schema)."""
    out = {}
    for key, value in counters.items():
        if isinstance(value, dict):
            value = sum(int(v) for v in value.values())
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[str(key)] = int(value)
    return out
