"""A differential refresh: read the sources' change since the stored offsets, compute the
change of the result (the operator tree's delta rules) and MERGE it into the stored table in one
commit with the new offsets, then publish the views.

Under `auto` it gives way to a full refresh (FullIsCheaper) before anything is written when a
rule of auto.py finds a rebuild cheaper: the model's own history, the change's size, the
delta SQL's reads.
"""

from __future__ import annotations

from typing import Callable, Optional

from python_helpers.dvm.keyed_result import UNIQUE_KEY_BROKEN
from python_helpers.dvm.operators.restricted_reads import OLD_ROWS_BROKEN
from python_helpers.dvm.sqlgen import render
from python_helpers.dvm.stored_result import MaintainedResult
from python_helpers.dvm.tree import Join, Node, OuterJoin, Recursive, SemiJoin, SetOp, Window, walk
from python_helpers.errors import ChangesUnavailable, ConcurrentRefresh, UniqueKeyViolated
from python_helpers.runtime.delta.base import Bindings, ConcurrentCommit, StoredRowsMissing
from python_helpers.runtime.refresh import auto, costs, read_budget, steps
from python_helpers.runtime.refresh.attempt import Attempt, plan_digest, schema_key
from python_helpers.runtime.refresh.auto import FullIsCheaper
from python_helpers.runtime.refresh.full import output_names, typed
from python_helpers.runtime.refresh.planning import Plan

# Stored results from this size on are read through the delta's row ids (touched_storage): on
# smaller ones the extra broadcast job costs more than the join it saves.
RESTRICT_STORAGE_BYTES = 8 * 1024 * 1024

_RECURSION_LIMITS = ("RECURSION_LEVEL_LIMIT_EXCEEDED", "RECURSION_ROW_LIMIT_EXCEEDED")


def reads_other_inputs(tree: Optional[Node]) -> bool:
    """Does a change reach rules that read other inputs for it (joins, sublinks, set
    operations, windows, recursions)? Only there is a filter that keeps none of a change worth
    a question to Spark (Context.empty_change): a round trip of 0.05-0.1 s, where a filter and
    an aggregate over the change alone cost about as much to compute."""
    kinds = (Join, OuterJoin, SemiJoin, SetOp, Window, Recursive)
    return tree is not None and any(isinstance(n, kinds) for n in walk(tree))


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
            attempt.change_rows = sum(counts.values())
            history = costs.completed(meta)
            auto.check_history(request, history, attempt.change_rows)
            if plan.tree is not None:
                auto.check_whole_input(request, plan.tree, {r for r, n in counts.items() if n}, history)
            auto.check_change_size(
                request, counts, lambda r: delta.row_count(plan.pinned[r].path, plan.pinned[r].state.version)
            )
            changed = bindings.load_changes()
        steps.reached("changes_read")
        with phases("analyze"):
            result = analyzed(attempt, bindings)
            attempt.analysis = {"names": list(result.output_names), "arg_types": dict(result.arg_types)}
            read_version = meta["read_version"]
            store_rel, types = bindings.stored(attempt.target, read_version)
            check_plan(request.model, result, meta.get("plan"))
            try:  # a recursion's delta is computed here already (Bindings.materialize)
                ctx = bindings.context(changed)
                stored_bytes = bindings.read_bytes().get(store_rel.name, 0)
                ctx.restrict_storage = stored_bytes >= RESTRICT_STORAGE_BYTES
                if not reads_other_inputs(plan.tree):
                    ctx.empty_change = None  # a filtered change would save no read: not asked
                # Asked only for a layout that can use it: the question opens the stored log.
                ctx.engine_looks_up = result.may_send_change and delta.looks_up_tuples(attempt.target, read_version)
                budget = read_budget.ReadBudget(request, bindings, attempt.counters, stored_bytes, history)
                # Judged ahead too where the history taught a lower bar: a similar change that
                # ran differentially since may be the very refresh that was slower than a rebuild.
                judged_before = auto.passed_before(request, history, attempt.change_rows)
                if changed and (budget.learned is not None or not judged_before):
                    budget.check_ahead(ctx, lambda ahead: result.merge_sql(ahead, store_rel, types))
                if ctx.materialize is not None:
                    ctx.materialize = with_scan_settings(bindings, budget.guard(ctx.materialize))
                merge = result.merge_sql(ctx, store_rel, types) if changed else None
            except Exception as err:  # noqa: BLE001 - Spark's recursion limits, a change that does not fit
                recursion_limit(plan, err)
                old_rows_broken(request.model, err)
                raise
            if merge is not None:
                budget.check(merge)
            attempt.counters.update(
                change_rows=dict(bindings.change_counts),
                files_read=bindings.files_read,
                files_skipped=bindings.files_skipped,
                reads_filtered_by_keys=bindings.page_filtered + bindings.filtered_here,
                reads_for_computed_keys=bindings.key_reads,
            )
            # After the estimate and the reads are counted: its history entry holds them.
            metadata = attempt.metadata("differential", result)
        try:
            with bindings.scan_settings():
                merged = delta.merge(
                    attempt.target,
                    render(merge) if merge is not None else None,
                    result.storage_columns(),
                    result.match_columns(),
                    metadata,
                    read_version,
                    phases,
                    change_rows=attempt.change_rows,
                    resolve=merge is not None and result.sends_change(ctx),
                )
        except ConcurrentCommit as err:
            raise ConcurrentRefresh(
                request.model,
                f"another refresh committed to the stored result first ({err}); nothing was applied",
                "run the refresh again",
            ) from None
        except Exception as err:  # noqa: BLE001 - Spark's recursion limits, a broken unique_key, a misfit change
            recursion_limit(plan, err)
            unique_key_broken(request.model, err)
            old_rows_broken(request.model, err)
            stored_rows_missing(request.model, err)
            raise
        if merged.rows:
            attempt.counters.update(
                rows_inserted=merged.inserted, rows_updated=merged.updated, rows_deleted=merged.deleted
            )
            if merged.files_rewritten:
                attempt.counters["files_rewritten"] = merged.files_rewritten
            if merged.by_executors:
                attempt.counters["merged_by_executors"] = 1
        with phases("publish"):
            attempt.publish(result)
        return merged.rows
    finally:
        bindings.close()


def with_scan_settings(bindings: Bindings, materialize: Callable) -> Callable:
    """`materialize` run inside the bindings' scan settings: an intermediate computed once (the
    delta of a join, its keys) reads key-restricted snapshots as the MERGE does, and Parquet skips
    pages by their key lists only with the IN-filter threshold raised (refresh/scan_settings.py).
    Asked per query: the restricted reads are bound while the query is rendered, before it runs."""

    def run(query):
        with bindings.scan_settings():
            return materialize(query)

    return run


def analyzed(attempt: Attempt, bindings: Bindings) -> MaintainedResult:
    """The stored-result plan, from the last refresh's analysis when the sources' schemas are
    the ones it saw (no Spark analysis), else analysed anew and checked against the stored layout."""
    cached = (attempt.meta or {}).get("analysis") or {}
    if cached.get("sources") == schema_key(attempt.plan):
        return attempt.stored_result_from_meta()
    plan = attempt.plan
    assert plan.tree is not None, "only a query with an operator tree is refreshed differentially"
    names = output_names(attempt.conn, attempt.model, plan, bindings)
    result = typed(
        attempt.conn,
        attempt.stored_layout(names),
        bindings,
    )
    if cached and (
        cached.get("names") != list(result.output_names) or (cached.get("arg_types") or {}) != result.arg_types
    ):
        raise ChangesUnavailable(
            attempt.model,
            "the types of the source columns the query reads changed "
            "since the last refresh, so the stored state no longer fits them",
        )
    return result


def check_plan(model: str, result: MaintainedResult, stored_plan: Optional[str]) -> None:
    """The stored state must be what this release's plan of the query keeps (attempt.plan_digest):
    a release that maintains the query another way (e.g. GROUPING SETS as one aggregate) rebuilds
    it once, in full, instead of applying its delta rules to state the old ones kept."""
    if stored_plan != plan_digest(result):
        raise ChangesUnavailable(
            model,
            "this version of dbt-spark-stream maintains the query with another plan than the one "
            "the stored result was built with",
        )


def unique_key_broken(model: str, err: Exception) -> None:
    """The MERGE rows' query stopped on the model's unique_key (raise_error): a typed error."""
    text = str(err)
    if UNIQUE_KEY_BROKEN not in text:
        return
    start = text.find("unique_key (")
    problem = text[start:].split(". SQLSTATE")[0].splitlines()[0] if start >= 0 else UNIQUE_KEY_BROKEN
    raise UniqueKeyViolated(
        model,
        f"{problem}; nothing was written",
        "fix the query (or the source rows) so the key is unique, or change or remove unique_key; "
        "then run dbt with --full-refresh",
    ) from None


def old_rows_broken(model: str, err: Exception) -> None:
    """A source's old rows, read as its new rows minus its change (key_restricted), came out with
    a negative count (raise_error): the change rows did not match the snapshot's value for value.
    Nothing was written; the refresh runs in full instead of trusting either."""
    # Spark's own text for raise_error, not the query's: an analysis error prints the SQL too.
    if f"USER_RAISED_EXCEPTION] {OLD_ROWS_BROKEN}" in str(err):
        raise ChangesUnavailable(
            model,
            f"{OLD_ROWS_BROKEN} value for value (a source's old rows are read as its new rows minus "
            "its change), so the change cannot be applied",
        ) from None


def stored_rows_missing(model: str, err: Exception) -> None:
    """The stored rows of a bag's losing tuples, looked up by the engine, hold less than the
    change takes (StoredRowsMissing): nothing was written; the refresh runs in full instead."""
    if isinstance(err, StoredRowsMissing):
        raise ChangesUnavailable(
            model, f"{err}: the stored result does not match the rows the change was computed against"
        ) from None


def recursion_limit(plan: Plan, err: Exception) -> None:
    """A delta recursion that does not end: derivations being subtracted (or added) can run
    around a cycle of the new data that the new result itself never reaches. The full refresh
    then computes the new result with Spark's own recursion (which fails in turn only if the
    new result is itself unbounded)."""
    text = str(err)
    limit = next((name for name in _RECURSION_LIMITS if name in text), None)
    if limit is not None and plan.tree is not None and any(isinstance(n, Recursive) for n in walk(plan.tree)):
        raise FullIsCheaper(
            f"the change's WITH RECURSIVE delta reached Spark's {limit} (a cycle that only changed rows lead to)",
            auto.RECURSION_LIMIT,
        ) from None
