"""Refresh orchestration: plan, decide the mode, run it, commit rows and offsets together,
publish the views, keep the storage tidy.

A refresh is a sequence of steps (`steps.reached`), and each is safe to die in:
* before the storage commit nothing the next run relies on has changed (it starts over);
* the commit carries rows and offsets together, and conflicts with any other refresh commit
  since the version this refresh read (the loser retries from the start);
* after the commit, the views are published from the newest stored version, and a later run
  that finds them behind publishes again even when no source moved.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Callable, Optional

from sqlglot import exp

from python_helpers.dvm.sqlgen import render
from python_helpers.dvm.stored_result import (
    ACTION,
    ROW_ID,
    RecomputeResult,
    StoredResult,
    plan_stored_result,
    storage_names,
)
from python_helpers.dvm.tree import Recursive, describe, walk
from python_helpers.errors import ChangesUnavailable, ConcurrentRefresh, InvalidConfig, StreamTableError
from python_helpers.runtime import contract, delta_tables, housekeeping, publishing, read_cost, steps, storage
from python_helpers.runtime.api import ENGINES, REFRESH_MODES, RefreshRequest, RefreshResult
from python_helpers.runtime.binding import Bindings
from python_helpers.runtime.catalog_views import Catalog
from python_helpers.runtime.decide import DIFFERENTIAL, Decision, decide, read_schema
from python_helpers.runtime.metrics import SparkMeter
from python_helpers.runtime.planning import Plan, plan_request
from python_helpers.runtime.server_checks import require_persistent_catalog
from python_helpers.runtime.settings import result_settings
from python_helpers.runtime.sources import storage_path
from python_helpers.runtime.timing import Phases
from python_helpers.sql.dialect import spark_sql
from python_helpers.sql.parse import fingerprint, relation_name

Log = Callable[[str, str], None]
# A refresh that loses a commit race starts over this many times in all before giving up.
MAX_ATTEMPTS = 3


def _default_log(level: str, text: str) -> None:
    print(f"[dbt-spark-stream] {level}: {text}", file=sys.stderr)


def run_refresh(spark, request: RefreshRequest, log: Optional[Log] = None) -> RefreshResult:
    log = log or _default_log
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    _validate(request)
    require_persistent_catalog(spark, request.model)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            return _refresh_once(spark, request, log)
        except ConcurrentRefresh as err:
            if attempt == MAX_ATTEMPTS:
                raise
            log("info", f"{request.model}: {err.problem}; starting over ({attempt} of {MAX_ATTEMPTS - 1} retries)")
    raise AssertionError("unreachable")


class FullIsCheaper(Exception):
    """The differential refresh gives way to a full one, for the reason given: the change is
    large enough that recomputing costs less (`auto`), or a delta recursion hit Spark's limit."""


def _refresh_once(spark, request: RefreshRequest, log: Log) -> RefreshResult:
    started = time.perf_counter()
    phases = Phases()
    model = request.model
    meter = SparkMeter(spark)

    with phases("plan"):
        plan = plan_request(spark, request)
        target = storage_path(spark, request.schema, request.identifier)
        meta = storage.read_metadata(target)
        print_fp = fingerprint(plan.definition, request.shaping_config, storage.FORMAT_VERSION)
        session = result_settings(spark)
        schema_now = read_schema(plan)
        decision = decide(request, plan, meta, print_fp, session, schema_now)
    steps.reached("planned")

    counters: dict = {}

    def result(mode: str, rows: int, **extra) -> RefreshResult:
        counters.update(meter.finish())
        return RefreshResult(model, mode, rows, time.perf_counter() - started,
                             source_versions={r: s.state.version for r, s in plan.pinned.items()},
                             phases=dict(phases.seconds), counters=dict(counters), **extra)

    context = _Context(spark, request, plan, target, meta, print_fp, session, schema_now, phases, log)
    context.counters = counters
    if decision == DIFFERENTIAL and all(meta["offsets"][r]["version"] == s.state.version
                                        for r, s in plan.pinned.items()):
        if publishing.up_to_date(spark, request, plan, target):
            return result("differential", 0, skipped=True)  # nothing moved: no Spark job, no commit
        with phases("publish"):  # a crash after the last commit left the views behind
            context.publish(context.stored_result_from_meta())
        return result("differential", 0, skipped=True)
    if decision == DIFFERENTIAL:
        try:
            return result("differential", _differential(context))
        except ChangesUnavailable as err:
            decision = Decision.full(f"{err.problem}; refreshing in full instead (nothing is lost)", warn=True)
        except FullIsCheaper as err:
            decision = Decision.full(str(err))
    # "fallback": a full refresh the user did not ask for; the adapter makes it a dbt warning
    # that --warn-error can turn into an error (before anything is written).
    log("fallback" if decision.warn else "info", f"{model}: full refresh ({decision.reason})")
    return result("full", _full(context), reason=decision.reason)


class _Context:
    """What one refresh attempt knows, handed to its steps."""

    def __init__(self, spark, request, plan, target, meta, print_fp, session, schema_now, phases, log):
        self.spark, self.request, self.plan, self.target, self.meta = spark, request, plan, target, meta
        self.print_fp, self.session, self.schema_now, self.phases, self.log = print_fp, session, schema_now, phases, log

    @property
    def model(self) -> str:
        return self.request.model

    def metadata(self, mode: str, result: Optional[StoredResult]) -> dict:
        previous = self.meta or {}
        meta = {"format": storage.FORMAT_VERSION, "model": self.model, "fingerprint": self.print_fp, "mode": mode,
                "layout": result.kind if result is not None else "recompute",
                "offsets": {r: {"version": s.state.version, "table_id": s.state.table_id, "path": s.path}
                            for r, s in self.plan.pinned.items()},
                "settings": self.session, "read_schema": self.schema_now,
                # differential refreshes since the last full one (float_recompute_every counts them)
                "differential_since_full": previous.get("differential_since_full", 0) + 1
                if mode == "differential" else 0}
        if result is not None and self.plan.tree is not None:
            # What Spark's analyser said of the query, for the source schemas it saw: the stored
            # state was laid out by it, and the next refresh reuses it instead of asking again.
            meta["analysis"] = {"sources": _schema_key(self.plan), "names": list(result.output_names),
                                "arg_types": dict(getattr(result, "arg_types", {}) or {})}
        return meta

    def stored_result_from_meta(self) -> StoredResult:
        """The stored layout as the last refresh recorded it (no Spark analysis)."""
        cached = (self.meta or {}).get("analysis") or {}
        result = plan_stored_result(self.model, self.plan.tree, cached["names"], self.plan.top_k)
        if hasattr(result, "arg_types"):
            result.arg_types = dict(cached.get("arg_types") or {})
        return result

    def publish(self, result: StoredResult) -> None:
        steps.reached("publishing")
        publishing.publish(self.spark, self.request, self.plan, self.target, result.view_sql, self.log)
        steps.reached("published")
        housekeeping.tidy(self.target, self.request.retention_hours, self.log, self.model)


def _validate(request: RefreshRequest) -> None:
    if request.refresh_mode not in REFRESH_MODES:
        raise InvalidConfig(request.model, f"refresh_mode '{request.refresh_mode}' is not one of "
                                           f"{', '.join(REFRESH_MODES)}", "fix the model's config")
    if request.engine not in ENGINES:
        raise InvalidConfig(request.model, f"engine '{request.engine}' is not one of {', '.join(ENGINES)}",
                            "fix the profile")
    threshold = request.auto_full_threshold
    if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not 0 <= threshold <= 1:
        raise InvalidConfig(request.model, f"auto_full_threshold must be a fraction between 0 and 1 "
                                           f"(0 disables the switch), got {threshold!r}", "fix the model's config")
    every = request.float_recompute_every
    if not isinstance(every, int) or isinstance(every, bool) or every < 0:
        raise InvalidConfig(request.model, f"float_recompute_every must be a whole number of refreshes "
                                           f"(0: never), got {every!r}", "fix the model's config")
    hours = request.retention_hours
    if not isinstance(hours, (int, float)) or isinstance(hours, bool) or hours < 0:
        raise InvalidConfig(request.model, f"retention_hours must be a number of hours >= 0, got {hours!r}",
                            "fix the model's config")
    if request.engine == "spark":
        raise InvalidConfig(request.model, "the spark engine (native Delta Lake SQL) is not implemented yet",
                            "use engine: embedded (or auto) in the profile")


_RECURSION_LIMITS = ("RECURSION_LEVEL_LIMIT_EXCEEDED", "RECURSION_ROW_LIMIT_EXCEEDED")


def _recursion_limit(plan: Plan, err: Exception) -> None:
    """A delta recursion that does not end: derivations being subtracted (or added) can run
    around a cycle of the new data that the new result itself never reaches. The full refresh
    then computes the new result with Spark's own recursion (which fails in turn only if the
    new result is itself unbounded)."""
    text = str(err)
    limit = next((name for name in _RECURSION_LIMITS if name in text), None)
    if limit is not None and plan.tree is not None and any(isinstance(n, Recursive) for n in walk(plan.tree)):
        raise FullIsCheaper(f"the change's WITH RECURSIVE delta reached Spark's {limit} (a cycle that only "
                            "changed rows lead to)") from None


# Below this many change rows of a source a differential refresh is cheap whatever the
# fraction (small tables): the switch is for large deltas, not small tables.
AUTO_FULL_MIN_CHANGE_ROWS = 10_000


def _check_change_size(request: RefreshRequest, plan: Plan, counts: dict) -> None:
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
        total, _ = table_stats(delta_tables.open_table(src.path, src.state.version))
        if total and rows / total > threshold:
            raise FullIsCheaper(f"{rows} change rows of {relation} are {rows / total:.0%} of its {total} rows, "
                                f"over auto_full_threshold={threshold:g}: a full refresh is cheaper")


def _check_read_cost(request: RefreshRequest, plan: Plan, merge: exp.Expression, bindings: Bindings,
                     counters: dict) -> None:
    """Under `auto`, give up the differential refresh when its SQL would read several times the
    bytes a rebuild reads (read_cost.py), judged from the Delta logs before the query runs."""
    full_bytes = 0
    for src in plan.pinned.values():
        table = delta_tables.open_table(src.path, src.state.version)
        if table is not None:
            full_bytes += read_cost.bytes_of_files(delta_tables.add_actions(table), [])
    estimate = read_cost.estimate(merge, bindings.view_bytes, full_bytes)
    counters.update(read_bytes=estimate.differential_bytes, full_read_bytes=estimate.full_bytes,
                    read_ratio_pct=int(round(estimate.ratio * 100)))
    reason = estimate.full_reason(read_cost.FULL_WHEN_READ_RATIO_OVER, read_cost.MIN_FULL_BYTES)
    if reason is not None and request.refresh_mode == "auto":
        raise FullIsCheaper(reason)


def _schema_key(plan: Plan) -> str:
    import hashlib
    import json

    schemas = {r: s.spark_types for r, s in sorted(plan.pinned.items())}
    return hashlib.md5(json.dumps(schemas, sort_keys=True).encode()).hexdigest()


def _analyzed(context: _Context, bindings: Bindings) -> StoredResult:
    """The stored-result plan, from the last refresh's analysis when the sources' schemas are
    the ones it saw (no Spark analysis), else analysed anew and checked against the stored layout."""
    cached = (context.meta or {}).get("analysis") or {}
    if cached.get("sources") == _schema_key(context.plan):
        return context.stored_result_from_meta()
    plan = context.plan
    names = _output_names(context.spark, context.model, plan, bindings)
    result = _typed(context.spark, plan_stored_result(context.model, plan.tree, names, plan.top_k), bindings)
    if cached and (cached.get("names") != list(result.output_names)
                   or (cached.get("arg_types") or {}) != (getattr(result, "arg_types", {}) or {})):
        raise ChangesUnavailable(context.model, "the types of the source columns the query reads changed "
                                                "since the last refresh, so the stored state no longer fits them")
    return result


def _full(context: _Context) -> int:
    spark, request, plan, phases = context.spark, context.request, context.plan, context.phases
    bindings = Bindings(spark, plan.pinned, {}, plan.columns if plan.tree is not None else {}, request.model)
    try:
        with phases("analyze"):
            Catalog(spark).check_name(request.schema, request.identifier, request.model, request.take_over_relation)
            names = _output_names(spark, request.model, plan, bindings)
            if request.contract:  # before anything is computed or written
                contract.check(request.model, request.contract,
                               spark.sql(spark_sql(_bind_plain_query(plan, bindings))).schema)
            if plan.tree is not None:
                result = _typed(spark, plan_stored_result(request.model, plan.tree, names, plan.top_k), bindings)
                frame = spark.sql(render(result.full_sql(bindings.context(set()))))
            else:
                result = RecomputeResult(request.model, names, storage_names(request.model, names))
                frame = spark.sql(spark_sql(_bind_plain_query(plan, bindings)))
            frame = frame.toDF(*result.storage_columns())
        with phases("compute"):
            data = frame.toArrow()
        steps.reached("computed")
        with phases("write"):
            read_version = (context.meta or {}).get("read_version")
            if read_version is None:
                existing = delta_tables.open_table(context.target)
                read_version = existing.version() if existing is not None else None
            try:
                storage.write_full(context.target, data, context.metadata("full", result), read_version)
                context.counters["rows_written"] = data.num_rows
            except storage.ConcurrentCommit as err:
                raise ConcurrentRefresh(request.model, f"another refresh committed to the stored result first ({err}); "
                                                       "nothing was written", "run the refresh again") from None
        steps.reached("committed")
        with phases("publish"):
            context.publish(result)
        return data.num_rows
    finally:
        bindings.close()


def _typed(spark, result: StoredResult, bindings: Bindings) -> StoredResult:
    """Give the plan the Spark types of the aggregate arguments it needs (analysis only, no job)."""
    typed = getattr(result, "typed_args", lambda: [])()
    if typed:
        query = result.args_query(bindings.context(set()))
        types = [f.dataType.simpleString() for f in spark.sql(render(query)).schema.fields]
        result.arg_types = {name: t for (name, _), t in zip(typed, types)}
    return result


def _bind_plain_query(plan: Plan, bindings: Bindings) -> exp.Expression:
    """The model's own SQL with each source bound to its snapshot at the pinned new version."""
    ctes = {c.alias_or_name.lower() for c in plan.query.find_all(exp.CTE)}

    def bind(node):
        if isinstance(node, exp.Table) and node.name and not (not node.db and node.name.lower() in ctes):
            relation = relation_name(node)
            if relation in plan.pinned:
                return exp.alias_(bindings.snapshot(relation, "new"), node.alias_or_name, table=True)
        return node

    return plan.query.copy().transform(bind)


def _output_names(spark, model: str, plan: Plan, bindings: Bindings) -> list:
    """The columns Spark gives the query (names like `count(1)` included), from analysis only."""
    try:
        return spark.sql(spark_sql(_bind_plain_query(plan, bindings))).columns
    except Exception as err:  # noqa: BLE001 - Spark's analysis error is the message the user needs
        raise StreamTableError(model, f"Spark rejects the query: {str(err).splitlines()[0][:400]}",
                               "fix the model SQL") from None


def _differential(context: _Context) -> int:
    spark, request, plan, phases, meta = context.spark, context.request, context.plan, context.phases, context.meta
    old_versions = {r: meta["offsets"][r]["version"] for r in plan.pinned}
    bindings = Bindings(spark, plan.pinned, old_versions, plan.columns, request.model)
    try:
        with phases("changes"):
            counts = bindings.count_changes()
            steps.reached("changes_counted")
            _check_change_size(request, plan, counts)
            changed = bindings.load_changes()
        steps.reached("changes_read")
        with phases("analyze"):
            result = _analyzed(context, bindings)
            read_version = meta["read_version"]
            stored = delta_tables.open_table(context.target, read_version)
            schema = delta_tables.spark_schema(delta_tables.arrow_schema(stored))
            files = delta_tables.file_paths(stored, context.target)
            frame = (spark.read.schema(schema).parquet(*[delta_tables.paths.glob_escaped(f) for f in files])
                     if files else spark.createDataFrame([], schema))
            store_rel = bindings.register(frame, "store")
            types = {f.name: f.dataType.simpleString() for f in schema.fields}
            try:  # a recursion's delta is computed here already (Bindings.materialize)
                merge = result.merge_sql(bindings.context(changed), store_rel, types) if changed else None
            except Exception as err:  # noqa: BLE001 - only Spark's recursion limits are handled here
                _recursion_limit(plan, err)
                raise
            metadata = context.metadata("differential", result)
            if merge is not None:
                bindings.view_bytes[store_rel.name] = read_cost.bytes_of_files(delta_tables.add_actions(stored), [])
                _check_read_cost(request, plan, merge, bindings, context.counters)
        context.counters.update(change_rows=dict(bindings.change_counts), files_read=bindings.files_read,
                                files_skipped=bindings.files_skipped)
        with phases("delta"):
            try:
                data = spark.sql(render(merge)).toArrow() if merge is not None else None
            except Exception as err:  # noqa: BLE001 - only Spark's recursion limits are handled here
                _recursion_limit(plan, err)
                raise
        rows = data.num_rows if data is not None else 0
        steps.reached("delta_computed")
        with phases("merge"):
            steps.reached("merging")
            try:
                if rows:
                    merged = storage.merge_rows(context.target, data, result.storage_columns(), ROW_ID, ACTION,
                                                metadata, read_version)
                    # What the MERGE did to the stored rows (one per group, or per distinct row
                    # with its multiplicity): delta-rs counts them as it applies them.
                    context.counters.update({f"rows_{what}": int((merged or {}).get(f"num_target_rows_{what}", 0))
                                             for what in ("inserted", "updated", "deleted")})
                else:
                    storage.commit_offsets_only(context.target, metadata, read_version)
            except storage.ConcurrentCommit as err:
                raise ConcurrentRefresh(request.model, f"another refresh committed to the stored result first "
                                                       f"({err}); nothing was applied",
                                        "run the refresh again") from None
            steps.reached("committed")
            if storage.maybe_compact(context.target):
                steps.reached("compacted")
        with phases("publish"):
            context.publish(result)
        return rows
    finally:
        bindings.close()


def explain(spark, request: RefreshRequest) -> str:
    """What the next refresh would do and why, and the operator tree (reads no data, writes
    nothing): the answer of `dbt run --vars '{stream_table_explain: true}'`."""
    model = request.model
    _validate(request)
    plan = plan_request(spark, request)
    meta = storage.read_metadata(storage_path(spark, request.schema, request.identifier))
    print_fp = fingerprint(plan.definition, request.shaping_config, storage.FORMAT_VERSION)
    try:
        decision = decide(request, plan, meta, print_fp, result_settings(spark), read_schema(plan))
    except StreamTableError as err:
        decision = Decision.full(f"it fails: {err}")
    if decision == DIFFERENTIAL:
        moved = [r for r, s in plan.pinned.items() if meta["offsets"][r]["version"] != s.state.version]
        mode = "differential" + (f" (changes in {', '.join(moved)})" if moved
                                 else " (no source moved: nothing to do)")
    else:
        mode = f"full ({decision.reason})"
    lines = [f"stream table {model}", f"  next refresh: {mode}",
             "  sources: " + ", ".join(f"{r}@v{s.state.version}" for r, s in plan.pinned.items())]
    if plan.tree is None:
        lines.append(f"  not differentiable: {plan.unsupported.construct}")
        return "\n".join(lines)
    if plan.definition != request.sql:
        lines.append("  views inlined: the tree reads their base tables")
    if plan.top_k is not None:
        first, last = plan.top_k.offset + 1, plan.top_k.offset + (plan.top_k.limit or 0)
        lines.append(f"  Top-K: the view shows rows {first}..{last} "
                     "of the stored result in the query's order")
    lines.append("  operator tree (strategy per operator: docs/supported-sql.md):")
    lines.extend("    " + line for line in describe(plan.tree).splitlines())
    return "\n".join(lines)
