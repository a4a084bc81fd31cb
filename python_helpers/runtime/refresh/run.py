"""Refresh orchestration: plan, decide the mode, run it, commit rows and offsets together,
publish the views, keep the storage tidy.

A refresh is a sequence of steps (`steps.reached`), and each is safe to die in:
* before the storage commit nothing the next run relies on has changed (it starts over);
* the commit carries rows and offsets together, and conflicts with any other refresh commit
  since the version this refresh read (the loser retries from the start);
* after the commit, the views are published from the newest stored version, and a later run
  that finds them behind publishes again even when no source moved.

One module per job in this package: planning.py (what the query is and reads), decide.py
(which mode, why), full.py and differential.py (compute and commit), requests.py (the request
and the result reported to dbt); attempt.py holds what one attempt knows, and the Delta engine
(runtime/delta/) reads, writes and publishes. This module runs them in order and starts over
after a lost commit race.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Optional

from python_helpers.dvm.tree import describe
from python_helpers.errors import (
    ChangesUnavailable,
    ConcurrentRefresh,
    InvalidConfig,
    StreamTableError,
)
from python_helpers.runtime.connections import trace
from python_helpers.runtime.connections.base import Connection, as_connection
from python_helpers.runtime.connections.metrics import SparkMeter
from python_helpers.runtime.connections.server_checks import require_persistent_catalog
from python_helpers.runtime.connections.trace import traced
from python_helpers.runtime.delta import metadata as metadata_format
from python_helpers.runtime.delta.base import DeltaEngine
from python_helpers.runtime.delta.choose import delta_engine
from python_helpers.runtime.refresh import steps
from python_helpers.runtime.refresh.attempt import Attempt
from python_helpers.runtime.refresh.auto import FullIsCheaper
from python_helpers.runtime.refresh.decide import DIFFERENTIAL, Decision, decide, read_schema
from python_helpers.runtime.refresh.differential import run_differential
from python_helpers.runtime.refresh.full import run_full
from python_helpers.runtime.refresh.planning import plan_request, read_consumed_commits
from python_helpers.runtime.refresh.requests import ENGINES, REFRESH_MODES, Log, RefreshRequest, RefreshResult
from python_helpers.runtime.refresh.settings import recorded_settings
from python_helpers.runtime.refresh.timing import Phases
from python_helpers.sql.parse import fingerprint

__all__ = ["Log", "explain", "run_refresh"]

# A refresh that loses a commit race starts over this many times in all before giving up.
MAX_ATTEMPTS = 3
# Below an hour a vacuum could remove files that a running query or refresh still reads.
MIN_RETENTION_HOURS = 1.0


def _default_log(level: str, text: str) -> None:
    if level != "debug":
        print(f"[dbt-spark-stream] {level}: {text}", file=sys.stderr)


def run_refresh(conn: Connection, request: RefreshRequest, log: Optional[Log] = None) -> RefreshResult:
    log = log or _default_log
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    _validate(request)
    conn = traced(conn, request.model)
    require_persistent_catalog(conn, request.model)
    delta = delta_engine(conn, request.engine, request.model)
    log("debug", f"{request.model}: the {delta.name} Delta engine refreshes it (profile engine: {request.engine})")
    with steps.refreshing(request.model):
        return _with_retries(delta, request, log)


def _with_retries(delta: DeltaEngine, request: RefreshRequest, log: Log) -> RefreshResult:
    try:
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                return _refresh_once(delta, request, log)
            except ConcurrentRefresh as err:
                if attempt == MAX_ATTEMPTS:
                    raise
                log("info", f"{request.model}: {err.problem}; starting over ({attempt} of {MAX_ATTEMPTS - 1} retries)")
        raise AssertionError("unreachable")
    finally:
        delta.close()


def _refresh_once(delta: DeltaEngine, request: RefreshRequest, log: Log) -> RefreshResult:
    started = time.perf_counter()
    started_ms = int(time.time() * 1000)
    phases = Phases()
    model = request.model
    meter = SparkMeter(delta.conn)
    statements_from = trace.statements_sent(delta.conn)  # this attempt's, after a retry too

    with phases("plan"):
        # The stored metadata first: it tells the engine what the last refresh knew of each
        # source (the spark engine then pins them without DESCRIBE DETAIL).
        target = delta.stored_location(request.schema, request.identifier)
        meta = delta.read_metadata(target)
        plan = plan_request(delta, request)
        read_consumed_commits(delta, plan, meta)
        print_fp = fingerprint(plan.definition, request.shaping(), metadata_format.FORMAT_VERSION)
        session = recorded_settings(delta.conn, plan.function_code)
        schema_now = read_schema(plan)
        # A rival that commits after the metadata was read (newer offsets than `meta` says) makes
        # this refresh's commit conflict: it starts over (MAX_ATTEMPTS).
        decision = decide(request, plan, meta, print_fp, session, schema_now)
    steps.reached("planned")

    attempt = Attempt(
        delta,
        request,
        plan,
        target,
        meta,
        print_fp,
        session,
        schema_now,
        phases,
        log,
        started_ms=started_ms,
        statements_from=statements_from,
    )

    def result(mode: str, rows: int, reason: Optional[str] = None, skipped: bool = False) -> RefreshResult:
        attempt.counters.update(meter.finish())
        # The whole refresh's, every attempt and what follows the commit included (a fresh
        # count per run_refresh: connections/trace.py).
        attempt.counters["spark_statements"] = trace.statements_sent(delta.conn)
        return RefreshResult(
            model,
            mode,
            rows,
            time.perf_counter() - started,
            reason=reason,
            skipped=skipped,
            source_versions={r: s.state.version for r, s in plan.pinned.items()},
            phases=dict(phases.seconds),
            counters=dict(attempt.counters),
            engine=delta.name,
        )

    if (
        decision == DIFFERENTIAL
        and meta is not None
        and all(meta["offsets"][r]["version"] == s.state.version for r, s in plan.pinned.items())
    ):
        if delta.up_to_date(request, plan, target):
            return result("differential", 0, skipped=True)  # nothing moved: no Spark job, no commit
        with phases("publish"):  # a crash after the last commit left the views behind
            attempt.publish(attempt.stored_result_from_meta())
        return result("differential", 0, skipped=True)
    with phases("plan"):
        delta.check_publishable(request, plan)  # before any commit: views that could not follow
    if decision == DIFFERENTIAL:
        try:
            return result("differential", run_differential(attempt))
        except ChangesUnavailable as err:
            decision = Decision.full(f"{err.problem}; refreshing in full instead (nothing is lost)", warn=True)
        except FullIsCheaper as err:
            decision = Decision.full(str(err))
            attempt.full_rule = err.rule
    # "fallback": a full refresh the user did not ask for; the adapter makes it a dbt warning
    # that --warn-error can turn into an error (before anything is written).
    log("fallback" if decision.warn else "info", f"{model}: full refresh ({decision.reason})")
    attempt.full_reason = decision.reason
    return result("full", run_full(attempt), reason=decision.reason)


def _validate(request: RefreshRequest) -> None:
    if request.refresh_mode not in REFRESH_MODES:
        raise InvalidConfig(
            request.model,
            f"refresh_mode '{request.refresh_mode}' is not one of {', '.join(REFRESH_MODES)}",
            "fix the model's config",
        )
    if request.engine not in ENGINES:
        raise InvalidConfig(
            request.model, f"engine '{request.engine}' is not one of {', '.join(ENGINES)}", "fix the profile"
        )
    threshold = request.auto_full_threshold
    if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not 0 <= threshold <= 1:
        raise InvalidConfig(
            request.model,
            f"auto_full_threshold must be a fraction between 0 and 1 (0 disables the switch), got {threshold!r}",
            "fix the model's config",
        )
    if not isinstance(request.auto_from_history, bool):
        raise InvalidConfig(
            request.model,
            f"auto_from_history must be true or false, got {request.auto_from_history!r}",
            "fix the model's config",
        )
    key = request.unique_key
    if not isinstance(key, list) or not all(isinstance(k, str) and k.strip() for k in key):
        raise InvalidConfig(
            request.model,
            f"unique_key must be a column name or a list of them, got {key!r}",
            "fix the model's config",
        )
    every = request.float_recompute_every
    if not isinstance(every, int) or isinstance(every, bool) or every < 0:
        raise InvalidConfig(
            request.model,
            f"float_recompute_every must be a whole number of refreshes (0: never), got {every!r}",
            "fix the model's config",
        )
    hours = request.retention_hours
    if not isinstance(hours, (int, float)) or isinstance(hours, bool) or hours < MIN_RETENTION_HOURS:
        raise InvalidConfig(
            request.model,
            f"retention_hours must be a number of hours of at least {MIN_RETENTION_HOURS:g}, got {hours!r}",
            "fix the model's config (the default, 168, keeps a week as Delta does)",
        )


def explain(spark, request: RefreshRequest) -> str:
    """What the next refresh would do and why, and the operator tree (reads no data, writes
    nothing): the answer of `dbt run --vars '{stream_table_explain: true}'`. `spark` is a
    SparkSession or a connection."""
    model = request.model
    conn = as_connection(spark)
    _validate(request)
    delta = delta_engine(conn, request.engine, model)
    try:
        meta = delta.read_metadata(delta.stored_location(request.schema, request.identifier))
        plan = plan_request(delta, request)
        read_consumed_commits(delta, plan, meta)
        print_fp = fingerprint(plan.definition, request.shaping(), metadata_format.FORMAT_VERSION)
        try:
            decision = decide(
                request, plan, meta, print_fp, recorded_settings(delta.conn, plan.function_code), read_schema(plan)
            )
        except StreamTableError as err:
            decision = Decision.full(f"it fails: {err}")
    finally:
        delta.close()
    if decision == DIFFERENTIAL and meta is not None:
        moved = [r for r, s in plan.pinned.items() if meta["offsets"][r]["version"] != s.state.version]
        mode = "differential" + (f" (changes in {', '.join(moved)})" if moved else " (no source moved: nothing to do)")
    else:
        mode = f"full ({decision.reason})"
    lines = [
        f"stream table {model}",
        f"  next refresh: {mode}",
        "  sources: " + ", ".join(f"{r}@v{s.state.version}" for r, s in plan.pinned.items()),
    ]
    if plan.tree is None:
        why = plan.unsupported.construct if plan.unsupported is not None else "no operator tree"
        lines.append(f"  not differentiable: {why}")
        return "\n".join(lines)
    if plan.definition != request.sql:
        lines.append("  views inlined: the tree reads their base tables")
    if plan.top_k is not None:
        first, last = plan.top_k.offset + 1, plan.top_k.offset + (plan.top_k.limit or 0)
        lines.append(f"  Top-K: the view shows rows {first}..{last} of the stored result in the query's order")
    lines.append("  operator tree (strategy per operator: docs/supported-sql.md):")
    lines.extend("    " + line for line in describe(plan.tree).splitlines())
    return "\n".join(lines)
