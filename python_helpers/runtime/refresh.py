"""Refresh orchestration: decide the mode, run it, commit rows and offsets together, publish views."""
from __future__ import annotations

import os
import sys
import time
from typing import Callable, Optional

from sqlglot import exp

from python_helpers.sql.dialect import spark_sql

from python_helpers.dvm.stored_result import (ACTION, ROW_ID, RecomputeResult, StoredResult, plan_stored_result,
                                              storage_names)
from python_helpers.dvm.sqlgen import render
from python_helpers.dvm.tree import Recursive, describe, walk
from python_helpers.errors import (ChangeFeedDisabled, ChangesUnavailable, ConcurrentRefresh, InvalidConfig,
                                   StreamTableError)
from python_helpers.runtime import catalog_views, delta_tables, published_files, storage
from python_helpers.runtime.api import ENGINES, REFRESH_MODES, RefreshRequest, RefreshResult
from python_helpers.runtime.binding import Bindings
from python_helpers.runtime.planning import Plan, plan_request
from python_helpers.runtime.timing import Phases
from python_helpers.runtime.sources import storage_path
from python_helpers.runtime.view_inlining import is_stored_table
from python_helpers.sql.parse import fingerprint, relation_name

Log = Callable[[str, str], None]


def _default_log(level: str, text: str) -> None:
    print(f"[dbt-spark-stream] {level}: {text}", file=sys.stderr)


def run_refresh(spark, request: RefreshRequest, log: Optional[Log] = None) -> RefreshResult:
    log = log or _default_log
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    _validate(request)
    started = time.perf_counter()
    phases = Phases()
    model = request.model

    def result(mode: str, rows: int, **extra) -> RefreshResult:
        return RefreshResult(model, mode, rows, time.perf_counter() - started,
                             source_versions={r: s.state.version for r, s in pinned.items()},
                             phases=dict(phases.seconds), **extra)

    with phases("plan"):
        plan = plan_request(spark, request)
        pinned = plan.pinned
        target = storage_path(spark, request.schema, request.identifier)
        meta = storage.read_metadata(target)
        print_fp = fingerprint(plan.definition, request.shaping_config, storage.FORMAT_VERSION)
        reason = _mode_reason(request, plan, meta, print_fp)
    if (reason is None and all(meta["offsets"][r]["version"] == s.state.version for r, s in pinned.items())
            and _views_exist(spark, request, plan)):
        # Nothing moved: no Spark job, no commit.
        return result("differential", 0, skipped=True)
    if reason is None:
        try:
            rows = _differential(spark, request, plan, target, meta, print_fp, phases)
            return result("differential", rows)
        except ChangesUnavailable as err:
            reason = err.problem
            log("warn", f"{model}: {reason}; refreshing in full instead (nothing is lost)")
        except FullIsCheaper as err:
            reason = str(err)
            log("info", f"{model}: full refresh ({reason})")
    elif reason.startswith("!"):
        reason = reason[1:]
        log("warn", f"{model}: {reason}")
    else:
        log("info", f"{model}: full refresh ({reason})")
    rows = _full(spark, request, plan, target, print_fp, phases)
    return result("full", rows, reason=reason)


def _mode_reason(request: RefreshRequest, plan: Plan, meta: Optional[dict], print_fp: str) -> Optional[str]:
    """Why the refresh must run in full (a leading '!' marks a warning), or None: differential."""
    reason = _full_reason(request, plan, meta, print_fp)
    if reason is None:
        reason = _source_reason(request.model, request, plan, meta)
    if reason is None and _float_recompute_due(request, meta):
        reason = (f"periodic recompute of floating-point aggregates (float_recompute_every="
                  f"{request.float_recompute_every})")
    return reason


class FullIsCheaper(Exception):
    """The differential refresh gives way to a full one, for the reason given: the change is
    large enough that recomputing costs less (`auto`), or a delta recursion hit Spark's limit."""


_RECURSION_LIMITS = ("RECURSION_LEVEL_LIMIT_EXCEEDED", "RECURSION_ROW_LIMIT_EXCEEDED")


def _recursion_limit(model: str, plan: Plan, err: Exception) -> None:
    """A delta recursion that does not end: derivations being subtracted (or added) can run
    around a cycle of the new data that the new result itself never reaches. The full refresh
    then computes the new result with Spark's own recursion (which fails in turn only if the
    new result is itself unbounded)."""
    text = str(err)
    limit = next((name for name in _RECURSION_LIMITS if name in text), None)
    if limit is not None and plan.tree is not None and any(isinstance(n, Recursive) for n in walk(plan.tree)):
        raise FullIsCheaper(f"the change's WITH RECURSIVE delta reached Spark's {limit} (a cycle that only "
                            "changed rows lead to)") from None


def _float_recompute_due(request: RefreshRequest, meta: Optional[dict]) -> bool:
    every = request.float_recompute_every
    if not every or meta is None:
        return False
    arg_types = (meta.get("analysis") or {}).get("arg_types") or {}
    floats = any(t in ("double", "float") for t in arg_types.values())
    return floats and meta.get("differential_since_full", 0) >= every


# Below this many change rows of a source a differential refresh is cheap whatever the
# fraction (small tables): the switch is for large deltas, not small tables.
AUTO_FULL_MIN_CHANGE_ROWS = 10_000


def _check_change_size(request: RefreshRequest, plan: Plan, bindings: Bindings) -> None:
    """Under `auto`, give up the differential refresh when a source changed by more than
    `auto_full_threshold` of its rows (the crossover is measured in benchmarks/)."""
    threshold = request.auto_full_threshold
    if request.refresh_mode != "auto" or not threshold:
        return
    for relation, rows in bindings.change_counts.items():
        if rows < AUTO_FULL_MIN_CHANGE_ROWS:
            continue
        src = plan.pinned[relation]
        total = delta_tables.row_count(src.path, src.state.version)
        if total and rows / total > threshold:
            raise FullIsCheaper(f"{rows} change rows of {relation} are {rows / total:.0%} of its {total} rows, "
                                f"over auto_full_threshold={threshold:g}: a full refresh is cheaper")


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
    if request.engine == "spark":
        raise InvalidConfig(request.model, "the spark engine (native Delta Lake SQL) is not implemented yet",
                            "use engine: embedded (or auto) in the profile")


def _full_reason(request: RefreshRequest, plan: Plan, meta: Optional[dict], print_fp: str) -> Optional[str]:
    """Why this refresh must run in full, or None. A leading '!' marks a reason worth a warning."""
    if plan.unsupported is not None:
        if request.refresh_mode == "differential":
            raise plan.unsupported
        return f"!not differentiable: {plan.unsupported.construct}"
    if request.full_refresh:
        return "--full-refresh"
    if request.refresh_mode == "full":
        return "refresh_mode='full'"
    if meta is None:
        return "first build"
    if meta.get("fingerprint") != print_fp:
        return "!the model's SQL or result-shaping config changed since the last refresh; rebuilt from scratch"
    if meta.get("format") != storage.FORMAT_VERSION:
        return "!stored result was written by another format version"
    return None


def _source_reason(model: str, request: RefreshRequest, plan: Plan, meta: dict) -> Optional[str]:
    for relation, src in plan.pinned.items():
        if not src.state.cdf_enabled:
            err = ChangeFeedDisabled(model, relation, src.path)
            if request.refresh_mode == "differential":
                raise err
            return f"!{err.problem}; {err.fix}"
        old = meta.get("offsets", {}).get(relation)
        if old is None:
            return f"!source {relation} was not read by the previous refresh"
        if old.get("table_id") != src.state.table_id or old["version"] > src.state.version:
            return f"!source {relation} was recreated since the last refresh (its Delta table id or version moved back)"
        if old["version"] < src.state.version and not _cdf_enabled_since(src, old["version"]):
            return f"!the change data feed of source {relation} was off for part of the versions since the last refresh"
    return None


def _cdf_enabled_since(src, version: int) -> bool:
    """The change feed must have been on in every version after `version` we will read."""
    try:
        table = delta_tables.open_table(src.path, version)
    except Exception:  # noqa: BLE001 - the version itself is gone; load_cdf will say so
        return True
    if table is None:
        return True
    config = table.metadata().configuration or {}
    return str(config.get(delta_tables.CDF_PROPERTY, "false")).lower() == "true"


def _offsets(plan: Plan) -> dict:
    return {r: {"version": s.state.version, "table_id": s.state.table_id, "path": s.path}
            for r, s in plan.pinned.items()}


def _metadata(request: RefreshRequest, plan: Plan, print_fp: str, mode: str, result: Optional[StoredResult],
              previous: Optional[dict] = None) -> dict:
    meta = {"format": storage.FORMAT_VERSION, "model": request.model, "fingerprint": print_fp, "mode": mode,
            "layout": result.kind if result is not None else "recompute", "offsets": _offsets(plan),
            # differential refreshes since the last full one (float_recompute_every counts them)
            "differential_since_full": (previous or {}).get("differential_since_full", 0) + 1
            if mode == "differential" else 0}
    if result is not None and plan.tree is not None:
        # What Spark's analyser said of the query, for the source schemas it saw: the stored state
        # was laid out by it, and the next refresh reuses it instead of asking again.
        meta["analysis"] = {"sources": _schema_key(plan), "names": list(result.output_names),
                            "arg_types": dict(getattr(result, "arg_types", {}) or {})}
    return meta


def _schema_key(plan: Plan) -> str:
    import hashlib
    import json

    schemas = {r: s.spark_types for r, s in sorted(plan.pinned.items())}
    return hashlib.md5(json.dumps(schemas, sort_keys=True).encode()).hexdigest()


def _analyzed(spark, request: RefreshRequest, plan: Plan, bindings: Bindings, meta: dict) -> StoredResult:
    """The stored-result plan, from the last refresh's analysis when the sources' schemas are
    the ones it saw (no Spark analysis), else analysed anew and checked against the stored layout."""
    cached = meta.get("analysis") or {}
    if cached.get("sources") == _schema_key(plan):
        result = plan_stored_result(request.model, plan.tree, cached["names"], plan.top_k)
        if hasattr(result, "arg_types"):
            result.arg_types = dict(cached.get("arg_types") or {})
        return result
    names = _output_names(spark, request.model, plan, bindings)
    result = _typed(spark, plan_stored_result(request.model, plan.tree, names, plan.top_k), bindings)
    if cached and (cached.get("names") != list(result.output_names)
                   or (cached.get("arg_types") or {}) != (getattr(result, "arg_types", {}) or {})):
        raise ChangesUnavailable(request.model, "the types of the source columns the query reads changed "
                                                "since the last refresh, so the stored state no longer fits them")
    return result


def _full(spark, request: RefreshRequest, plan: Plan, target: str, print_fp: str, phases: Phases) -> int:
    bindings = Bindings(spark, plan.pinned, {}, plan.columns if plan.tree is not None else {}, request.model)
    try:
        with phases("analyze"):
            names = _output_names(spark, request.model, plan, bindings)
            if plan.tree is not None:
                result = _typed(spark, plan_stored_result(request.model, plan.tree, names, plan.top_k), bindings)
                frame = spark.sql(render(result.full_sql(bindings.context(set()))))
            else:
                result = RecomputeResult(request.model, names, storage_names(request.model, names))
                frame = spark.sql(spark_sql(_bind_plain_query(plan, bindings)))
            frame = frame.toDF(*result.storage_columns())
        with phases("compute"):
            data = frame.toArrow()
        with phases("write"):
            storage.write_full(target, data, _metadata(request, plan, print_fp, "full", result))
        with phases("publish"):
            _publish(spark, request, plan, target, result, full=True)
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


def _differential(spark, request: RefreshRequest, plan: Plan, target: str, meta: dict, print_fp: str,
                  phases: Phases) -> int:
    old_versions = {r: meta["offsets"][r]["version"] for r in plan.pinned}
    bindings = Bindings(spark, plan.pinned, old_versions, plan.columns, request.model)
    try:
        with phases("changes"):
            try:
                changed = bindings.load_changes()
            except Exception as err:  # noqa: BLE001 - delta-rs reports missing files / versions variously
                raise ChangesUnavailable(
                    request.model, f"the changes since the last refresh can no longer be read "
                                   f"({type(err).__name__}: {str(err).splitlines()[0][:300]})") from None
            _check_change_size(request, plan, bindings)
        with phases("analyze"):
            result = _analyzed(spark, request, plan, bindings, meta)
            read_version = meta["read_version"]
            stored = delta_tables.open_table(target, read_version)
            schema = delta_tables.spark_schema(storage_schema(stored))
            files = [delta_tables.local_path(u) for u in stored.file_uris()]
            frame = spark.read.schema(schema).parquet(*files) if files else spark.createDataFrame([], schema)
            store_rel = bindings.register(frame, "store")
            types = {f.name: f.dataType.simpleString() for f in schema.fields}
            try:  # a recursion's delta is computed here already (Bindings.materialize)
                merge = result.merge_sql(bindings.context(changed), store_rel, types) if changed else None
            except Exception as err:  # noqa: BLE001 - only Spark's recursion limits are handled here
                _recursion_limit(request.model, plan, err)
                raise
            metadata = _metadata(request, plan, print_fp, "differential", result, meta)
        with phases("delta"):
            try:
                data = spark.sql(render(merge)).toArrow() if merge is not None else None
            except Exception as err:  # noqa: BLE001 - only Spark's recursion limits are handled here
                _recursion_limit(request.model, plan, err)
                raise
        rows = data.num_rows if data is not None else 0
        with phases("merge"):
            try:
                if rows:
                    storage.merge_rows(target, data, result.storage_columns(), ROW_ID, ACTION, metadata,
                                       read_version)
                else:
                    storage.commit_offsets_only(target, metadata, read_version)
            except storage.CommitFailedError as err:
                raise ConcurrentRefresh(request.model, f"another writer committed to the stored result during "
                                                       f"this refresh ({err}); nothing was applied",
                                        "run the refresh again") from None
            storage.maybe_compact(target)
        with phases("publish"):
            _publish(spark, request, plan, target, result, full=False)
        return rows
    finally:
        bindings.close()


def storage_schema(table):
    import pyarrow as pa

    schema = table.schema()
    raw = schema.to_arrow() if hasattr(schema, "to_arrow") else schema.to_pyarrow()
    return delta_tables.normalize_schema(pa.schema(raw))


def _publish(spark, request: RefreshRequest, plan: Plan, target: str, result: StoredResult, full: bool) -> None:
    """(Re)create the views: the stream table over its live files, each source at its pinned version."""
    for relation, src in plan.pinned.items():
        if is_stored_table(relation):
            continue  # an upstream stream table's stored table: its own view is the published one

        def source_query(src=src):
            root = delta_tables.local_path(src.path)
            files = [delta_tables.local_path(u)
                     for u in delta_tables.open_table(src.path, src.state.version).file_uris()]
            return catalog_views.source_view_query(root, files, src.spark_types, src.state.partition_columns)

        catalog_views.publish_source(spark, relation, (src.path, src.state.table_id, src.state.version),
                                     source_query)
    stored = delta_tables.open_table(target)  # the newest version, even if another refresh made it
    types = delta_tables.spark_type_strings(storage_schema(stored))
    files = [delta_tables.local_path(u) for u in stored.file_uris()]
    linked = published_files.publish(delta_tables.local_path(target), stored.metadata().id, stored.version(), files)
    if linked is not None:
        relation = exp.Table(this=exp.to_identifier(linked, quoted=True), db=exp.to_identifier("parquet"))
    else:
        relation = catalog_views.files_relation(delta_tables.local_path(target), files, types)
    # After a full refresh the column types may differ under the same view text: re-create.
    catalog_views.replace_view(spark, request.schema, request.identifier, result.view_sql(relation, types),
                               force=full)


def _views_exist(spark, request: RefreshRequest, plan: Plan) -> bool:
    names = [(request.schema, request.identifier)] + [tuple(r.split(".")[-2:]) for r in plan.pinned
                                                      if not is_stored_table(r)]
    if all(spark.catalog.tableExists(f"{s}.{n}") for s, n in names):
        return True
    catalog_views.forget(spark)  # someone dropped one: the next publish re-creates, not skips
    return False


def explain(spark, request: RefreshRequest) -> str:
    """What the next refresh would do and why, and the operator tree (reads no data, writes
    nothing): the answer of `dbt run --vars '{stream_table_explain: true}'`."""
    model = request.model
    _validate(request)
    plan = plan_request(spark, request)
    meta = storage.read_metadata(storage_path(spark, request.schema, request.identifier))
    print_fp = fingerprint(plan.definition, request.shaping_config, storage.FORMAT_VERSION)
    try:
        reason = _mode_reason(request, plan, meta, print_fp)
    except StreamTableError as err:
        reason = f"!it fails: {err}"
    if reason is None:
        moved = [r for r, s in plan.pinned.items() if meta["offsets"][r]["version"] != s.state.version]
        mode = ("differential" + (f" (changes in {', '.join(moved)})" if moved else " (no source moved: nothing to do)"))
    else:
        mode = f"full ({reason.lstrip('!')})"
    lines = [f"stream table {model}", f"  next refresh: {mode}",
             "  sources: " + ", ".join(f"{r}@v{s.state.version}" for r, s in plan.pinned.items())]
    if plan.tree is None:
        lines.append(f"  not differentiable: {plan.unsupported.construct}")
        return "\n".join(lines)
    if plan.definition != request.sql:
        lines.append("  views inlined: the tree reads their base tables")
    if plan.top_k is not None:
        lines.append(f"  Top-K: the view shows rows {plan.top_k.offset + 1}..{plan.top_k.offset + (plan.top_k.limit or 0)} "
                     "of the stored result in the query's order")
    lines.append("  operator tree (strategy per operator: docs/supported-sql.md):")
    lines.extend("    " + line for line in describe(plan.tree).splitlines())
    return "\n".join(lines)
