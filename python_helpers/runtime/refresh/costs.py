"""What past refreshes of a stream table cost: a short history in its own commit metadata.

Each refresh commit carries the last HISTORY_KEEP refreshes, newest last, as entries
{mode, reason, rule, change_rows, started_ms, seconds, phases, read_ratio_pct, files_read,
files_skipped, read_bytes}. A refresh cannot know its own length
when it commits (the commit is most of the work), so its entry goes in with `seconds` unset,
and the next refresh completes it from the commit's timestamp: seconds = commit time − start.
The start is the dbt process's clock and the commit time the writer's (the dbt process for the
embedded engine, Spark's driver for the spark engine): a clock skew between the two shifts every
entry by the same amount; a negative or implausible length is left unknown.

Pure functions over plain dicts: `auto` reads them (auto.py), `stream_table_status` prints them.
"""

from __future__ import annotations

import statistics
from typing import Optional

HISTORY_KEEP = 12
READS = ("files_read", "files_skipped", "read_bytes")  # the counters an entry keeps (entry's `reads`)
_LONGEST_SECONDS = 7 * 24 * 3600.0  # longer than a week: a clock went wrong, the length is unknown


def entry(
    mode: str,
    started_ms: int,
    change_rows: Optional[int],
    reason: Optional[str],
    phases: dict,
    invocation_id: Optional[str] = None,
    rule: Optional[str] = None,
    read_ratio_pct: Optional[int] = None,
    read_bar_pct: Optional[int] = None,
    reads: Optional[dict] = None,
    statements: Optional[int] = None,
) -> dict:
    """This refresh's entry, as its commit records it (`seconds` completed by the next refresh).
    `rule`: which of auto's rules sent it to full (auto.py); `read_ratio_pct`: the read
    estimate's ratio, of a differential refresh or of one that estimate sent to full;
    `read_bar_pct`: the bar that estimate was over (2x, 1.5x for intermediates, or learned);
    `reads`: what a differential refresh read ({files_read, files_skipped, read_bytes}: the
    refresh's counters, known before its commit); `statements`: the statements it had Spark
    analyse before its write (connections/trace.py): the commit's metadata is made before the
    statement that computes and writes the result, which adapter_response counts with the rest."""
    out = {
        "mode": mode,
        "reason": (reason or "")[:200] or None,
        "change_rows": change_rows,
        "started_ms": int(started_ms),
        "seconds": None,
        "phases": {k: round(float(v), 3) for k, v in phases.items()},
    }
    if invocation_id:
        out["invocation_id"] = str(invocation_id)
    if rule:
        out["rule"] = rule
    if read_ratio_pct is not None:
        out["read_ratio_pct"] = int(read_ratio_pct)
    if read_bar_pct is not None:
        out["read_bar_pct"] = int(read_bar_pct)
    for name in READS:
        value = (reads or {}).get(name)
        if isinstance(value, int):
            out[name] = value
    if isinstance(statements, int):
        out["spark_statements"] = statements
    return out


def completed(meta: Optional[dict]) -> list:
    """The history the last refresh committed, its own (newest) entry's length filled in from
    its commit's timestamp."""
    if not meta:
        return []
    history = [dict(e) for e in meta.get("history") or [] if isinstance(e, dict)]
    if history and history[-1].get("seconds") is None:
        committed = meta.get("committed_at_ms")
        started = history[-1].get("started_ms")
        if committed is not None and started is not None:
            seconds = (int(committed) - int(started)) / 1000.0
            if 0 <= seconds <= _LONGEST_SECONDS:
                history[-1]["seconds"] = round(seconds, 3)
    return history


def extended(meta: Optional[dict], new: dict) -> list:
    """The history this refresh commits: the completed one and its own entry, the newest kept."""
    return (completed(meta) + [new])[-HISTORY_KEEP:]


def median_seconds(entries: list) -> Optional[float]:
    lengths = [float(e["seconds"]) for e in entries if e.get("seconds") is not None]
    return statistics.median(lengths) if lengths else None
