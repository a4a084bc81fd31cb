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
from python_helpers.dvm.stored_result import ACTION, ROW_ID, MaintainedResult, plan_stored_result
from python_helpers.dvm.tree import Recursive, walk
from python_helpers.errors import ChangesUnavailable, ConcurrentRefresh
from python_helpers.runtime import delta_tables, paths, read_cost, steps, storage
from python_helpers.runtime.attempt import Attempt, FullIsCheaper, schema_key
from python_helpers.runtime.binding import Bindings
from python_helpers.runtime.full_refresh import output_names, typed
from python_helpers.runtime.planning import Plan
from python_helpers.runtime.requests import RefreshRequest

# Below this many change rows of a source a differential refresh is cheap whatever the
# fraction (small tables): the switch is for large deltas, not small tables.
AUTO_FULL_MIN_CHANGE_ROWS = 10_000

_RECURSION_LIMITS = ("RECURSION_LEVEL_LIMIT_EXCEEDED", "RECURSION_ROW_LIMIT_EXCEEDED")


def run_differential(attempt: Attempt) -> int:
    """Rows of the stored result the MERGE wrote (0 when the change cancelled out)."""
    engine, request, plan, phases = attempt.engine, attempt.request, attempt.plan, attempt.phases
    meta = attempt.meta
    assert meta is not None, "a differential refresh starts from the last refresh's metadata"
    old_versions = {r: meta["offsets"][r]["version"] for r in plan.pinned}
    bindings = Bindings(engine, plan.pinned, old_versions, plan.columns, request.model)
    try:
        with phases("changes"):
            counts = bindings.count_changes()
            steps.reached("changes_counted")
            check_change_size(request, plan, counts)
            changed = bindings.load_changes()
        steps.reached("changes_read")
        with phases("analyze"):
            result = analyzed(attempt, bindings)
            read_version = meta["read_version"]
            stored = delta_tables.table_at(attempt.target, read_version)
            schema = delta_tables.arrow_schema(stored)
            files = delta_tables.file_paths(stored, attempt.target)
            store_rel = bindings.bind_files("store", [paths.glob_escaped(f) for f in files], schema)
            types = delta_tables.spark_type_strings(schema)
            try:  # a recursion's delta is computed here already (Bindings.materialize)
                merge = result.merge_sql(bindings.context(changed), store_rel, types) if changed else None
            except Exception as err:  # noqa: BLE001 - only Spark's recursion limits are handled here
                recursion_limit(plan, err)
                raise
            metadata = attempt.metadata("differential", result)
            if merge is not None:
                bindings.view_bytes[store_rel.name] = read_cost.bytes_of_files(delta_tables.add_actions(stored), [])
                check_read_cost(request, plan, merge, bindings, attempt.counters)
        attempt.counters.update(
            change_rows=dict(bindings.change_counts),
            files_read=bindings.files_read,
            files_skipped=bindings.files_skipped,
            reads_filtered_by_keys=bindings.page_filtered,
        )
        with phases("delta"), bindings.scan_settings():
            try:
                data = engine.arrow(render(merge)) if merge is not None else None
            except Exception as err:  # noqa: BLE001 - only Spark's recursion limits are handled here
                recursion_limit(plan, err)
                raise
        rows = data.num_rows if data is not None else 0
        steps.reached("delta_computed")
        with phases("merge"):
            steps.reached("merging")
            try:
                if data is not None and rows:
                    merged = storage.merge_rows(
                        attempt.target, data, result.storage_columns(), ROW_ID, ACTION, metadata, read_version
                    )
                    # What the MERGE did to the stored rows (one per group, or per distinct row
                    # with its multiplicity): delta-rs counts them as it applies them.
                    attempt.counters.update(
                        {
                            f"rows_{what}": int((merged or {}).get(f"num_target_rows_{what}", 0))
                            for what in ("inserted", "updated", "deleted")
                        }
                    )
                else:
                    storage.commit_offsets_only(attempt.target, metadata, read_version)
            except storage.ConcurrentCommit as err:
                raise ConcurrentRefresh(
                    request.model,
                    f"another refresh committed to the stored result first ({err}); nothing was applied",
                    "run the refresh again",
                ) from None
            steps.reached("committed")
            if storage.maybe_compact(attempt.target):
                steps.reached("compacted")
        with phases("publish"):
            attempt.publish(result)
        return rows
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
    names = output_names(attempt.engine, attempt.model, plan, bindings)
    result = typed(attempt.engine, plan_stored_result(attempt.model, plan.tree, names, plan.top_k), bindings)
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


def check_change_size(request: RefreshRequest, plan: Plan, counts: dict) -> None:
    """Under `auto`, give up the differential refresh when a source changed by more than
    `auto_full_threshold` of its rows, judged from the Delta log before any change is read
    (the crossover is measured in benchmarks/)."""
    threshold = request.auto_full_threshold
    if request.refresh_mode != "auto" or not threshold:
        return
    from python_helpers.runtime.change_feed import table_stats

    for relation, rows in counts.items():
        if rows < AUTO_FULL_MIN_CHANGE_ROWS:
            continue
        src = plan.pinned[relation]
        total, _ = table_stats(delta_tables.table_at(src.path, src.state.version))
        if total and rows / total > threshold:
            raise FullIsCheaper(
                f"{rows} change rows of {relation} are {rows / total:.0%} of its {total} rows, "
                f"over auto_full_threshold={threshold:g}: a full refresh is cheaper"
            )


def check_read_cost(request: RefreshRequest, plan: Plan, merge: exp.Expr, bindings: Bindings, counters: dict) -> None:
    """Under `auto`, give up the differential refresh when its SQL would read several times the
    bytes a rebuild reads (read_cost.py), judged from the Delta logs before the query runs."""
    full_bytes = 0
    for src in plan.pinned.values():
        table = delta_tables.open_table(src.path, src.state.version)
        if table is not None:
            full_bytes += read_cost.bytes_of_files(delta_tables.add_actions(table), [])
    estimate = read_cost.estimate(merge, bindings.view_bytes, full_bytes)
    counters.update(
        read_bytes=estimate.differential_bytes,
        full_read_bytes=estimate.full_bytes,
        read_ratio_pct=int(round(estimate.ratio * 100)),
    )
    reason = estimate.full_reason(read_cost.FULL_WHEN_READ_RATIO_OVER, read_cost.MIN_FULL_BYTES)
    if reason is not None and request.refresh_mode == "auto":
        raise FullIsCheaper(reason)
