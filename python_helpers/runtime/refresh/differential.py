"""A differential refresh: read the sources' change since the stored offsets, compute the
change of the result (the operator tree's delta rules) and MERGE it into the stored table in one
commit with the new offsets, then publish the views.

Under `auto` it gives way to a full refresh (FullIsCheaper) before anything is written when the
change is a large part of a source, or when its SQL would read several times what a rebuild
reads: both judged from the Delta logs.
"""

from __future__ import annotations

from sqlglot import exp

from python_helpers.dvm.sqlgen import render
from python_helpers.dvm.stored_result import MaintainedResult, plan_stored_result
from python_helpers.dvm.tree import Recursive, walk
from python_helpers.errors import ChangesUnavailable, ConcurrentRefresh
from python_helpers.runtime.delta.base import Bindings, ConcurrentCommit
from python_helpers.runtime.refresh import read_cost, steps
from python_helpers.runtime.refresh.attempt import Attempt, FullIsCheaper, schema_key
from python_helpers.runtime.refresh.full import output_names, typed
from python_helpers.runtime.refresh.planning import Plan
from python_helpers.runtime.refresh.requests import RefreshRequest

# Below this many change rows of a source a differential refresh is cheap whatever the
# fraction (small tables): the switch is for large deltas, not small tables.
AUTO_FULL_MIN_CHANGE_ROWS = 10_000

_RECURSION_LIMITS = ("RECURSION_LEVEL_LIMIT_EXCEEDED", "RECURSION_ROW_LIMIT_EXCEEDED")


def run_differential(attempt: Attempt) -> int:
    """Rows of the stored result the MERGE wrote (0 when the change cancelled out)."""
    delta, request, plan, phases = attempt.delta, attempt.request, attempt.plan, attempt.phases
    meta = attempt.meta
    assert meta is not None, "a differential refresh starts from the last refresh's metadata"
    old_versions = {r: meta["offsets"][r]["version"] for r in plan.pinned}
    bindings = delta.bindings(plan.pinned, old_versions, plan.columns, request.model)
    try:
        with phases("changes"):
            counts = bindings.count_changes()
            steps.reached("changes_counted")
            check_change_size(attempt, counts)
            changed = bindings.load_changes()
        steps.reached("changes_read")
        with phases("analyze"):
            result = analyzed(attempt, bindings)
            read_version = meta["read_version"]
            store_rel, types = bindings.stored(attempt.target, read_version)
            try:  # a recursion's delta is computed here already (Bindings.materialize)
                merge = result.merge_sql(bindings.context(changed), store_rel, types) if changed else None
            except Exception as err:  # noqa: BLE001 - only Spark's recursion limits are handled here
                recursion_limit(plan, err)
                raise
            metadata = attempt.metadata("differential", result)
            if merge is not None:
                check_read_cost(request, merge, bindings, attempt.counters)
        attempt.counters.update(
            change_rows=dict(bindings.change_counts),
            files_read=bindings.files_read,
            files_skipped=bindings.files_skipped,
            reads_filtered_by_keys=bindings.page_filtered,
        )
        try:
            with bindings.scan_settings():
                merged = delta.merge(
                    attempt.target,
                    render(merge) if merge is not None else None,
                    result.storage_columns(),
                    metadata,
                    read_version,
                    phases,
                )
        except ConcurrentCommit as err:
            raise ConcurrentRefresh(
                request.model,
                f"another refresh committed to the stored result first ({err}); nothing was applied",
                "run the refresh again",
            ) from None
        except Exception as err:  # noqa: BLE001 - only Spark's recursion limits are handled here
            recursion_limit(plan, err)
            raise
        if merged.rows:
            attempt.counters.update(
                rows_inserted=merged.inserted, rows_updated=merged.updated, rows_deleted=merged.deleted
            )
        with phases("publish"):
            attempt.publish(result)
        return merged.rows
    finally:
        bindings.close()


def analyzed(attempt: Attempt, bindings: Bindings) -> MaintainedResult:
    """The stored-result plan, from the last refresh's analysis when the sources' schemas are
    the ones it saw (no Spark analysis), else analysed anew and checked against the stored layout."""
    cached = (attempt.meta or {}).get("analysis") or {}
    if cached.get("sources") == schema_key(attempt.plan):
        return attempt.stored_result_from_meta()
    plan = attempt.plan
    assert plan.tree is not None, "only a query with an operator tree is refreshed differentially"
    names = output_names(attempt.conn, attempt.model, plan, bindings)
    result = typed(attempt.conn, plan_stored_result(attempt.model, plan.tree, names, plan.top_k), bindings)
    if cached and (
        cached.get("names") != list(result.output_names) or (cached.get("arg_types") or {}) != result.arg_types
    ):
        raise ChangesUnavailable(
            attempt.model,
            "the types of the source columns the query reads changed "
            "since the last refresh, so the stored state no longer fits them",
        )
    return result


def recursion_limit(plan: Plan, err: Exception) -> None:
    """A delta recursion that does not end: derivations being subtracted (or added) can run
    around a cycle of the new data that the new result itself never reaches. The full refresh
    then computes the new result with Spark's own recursion (which fails in turn only if the
    new result is itself unbounded)."""
    text = str(err)
    limit = next((name for name in _RECURSION_LIMITS if name in text), None)
    if limit is not None and plan.tree is not None and any(isinstance(n, Recursive) for n in walk(plan.tree)):
        raise FullIsCheaper(
            f"the change's WITH RECURSIVE delta reached Spark's {limit} (a cycle that only changed rows lead to)"
        ) from None


def check_change_size(attempt: Attempt, counts: dict) -> None:
    """Under `auto`, give up the differential refresh when a source changed by more than
    `auto_full_threshold` of its rows, judged from the Delta log before any change is read
    (the crossover is measured in benchmarks/)."""
    request, plan = attempt.request, attempt.plan
    threshold = request.auto_full_threshold
    if request.refresh_mode != "auto" or not threshold:
        return
    for relation, rows in counts.items():
        if rows < AUTO_FULL_MIN_CHANGE_ROWS:
            continue
        src = plan.pinned[relation]
        total = attempt.delta.row_count(src.path, src.state.version)
        if total and rows / total > threshold:
            raise FullIsCheaper(
                f"{rows} change rows of {relation} are {rows / total:.0%} of its {total} rows, "
                f"over auto_full_threshold={threshold:g}: a full refresh is cheaper"
            )


def check_read_cost(request: RefreshRequest, merge: exp.Expr, bindings: Bindings, counters: dict) -> None:
    """Under `auto`, give up the differential refresh when its SQL would read several times the
    bytes a rebuild reads (read_cost.py), judged from the Delta logs before the query runs."""
    full_bytes = bindings.full_read_bytes()
    if full_bytes is None:
        return  # the engine cannot tell without reading: the rule does not apply
    estimate = read_cost.estimate(merge, bindings.read_bytes(), full_bytes)
    counters.update(
        read_bytes=estimate.differential_bytes,
        full_read_bytes=estimate.full_bytes,
        read_ratio_pct=int(round(estimate.ratio * 100)),
    )
    reason = estimate.full_reason(read_cost.FULL_WHEN_READ_RATIO_OVER, read_cost.MIN_FULL_BYTES)
    if reason is not None and request.refresh_mode == "auto":
        raise FullIsCheaper(reason)
