"""A full refresh: compute the whole stored result in Spark and overwrite the stored table with
it in one commit (rows and offsets together), then publish the views."""

from __future__ import annotations

from typing import Optional

from sqlglot import exp

from python_helpers.dvm.sqlgen import render
from python_helpers.dvm.stored_result import (
    MaintainedResult,
    RecomputeResult,
    StoredResult,
    storage_names,
)
from python_helpers.errors import ConcurrentRefresh, StreamTableError
from python_helpers.runtime.catalog.views import Catalog
from python_helpers.runtime.connections.base import Connection
from python_helpers.runtime.delta.base import Bindings, ConcurrentCommit
from python_helpers.runtime.refresh import contract, steps
from python_helpers.runtime.refresh.attempt import Attempt
from python_helpers.runtime.refresh.planning import Plan
from python_helpers.sql.dialect import spark_sql
from python_helpers.sql.parse import relation_name


def run_full(attempt: Attempt) -> int:
    """Rows written."""
    conn, request, plan, phases = attempt.conn, attempt.request, attempt.plan, attempt.phases
    bindings = attempt.delta.bindings(plan.pinned, {}, plan.columns if plan.tree is not None else {}, request.model)
    try:
        with phases("analyze"):
            Catalog(conn).check_name(
                request.schema,
                request.identifier,
                request.model,
                request.take_over_relation,
                information=request.catalog_information,
            )
            reused = reused_analysis(attempt)
            names = list(reused.output_names) if reused else output_names(conn, request.model, plan, bindings)
            if request.contract:  # before anything is computed or written
                contract.check(
                    request.model,
                    request.contract,
                    conn.output_columns(spark_sql(bind_plain_query(plan, bindings))),
                )
            result: StoredResult
            if plan.tree is not None:
                maintained = reused or typed(conn, attempt.stored_layout(names), bindings)
                sql = render(maintained.full_sql(bindings.context(set())))
                result = maintained
            else:
                result = RecomputeResult(request.model, names, storage_names(request.model, names))
                sql = spark_sql(bind_plain_query(plan, bindings))
        read_version = (attempt.meta or {}).get("read_version")
        if read_version is None:
            read_version = attempt.delta.stored_version(attempt.target)
        try:
            rows = attempt.delta.write_full(
                attempt.target, sql, result.storage_columns(), attempt.metadata("full", result), read_version, phases
            )
            attempt.counters["rows_written"] = rows
        except ConcurrentCommit as err:
            raise ConcurrentRefresh(
                request.model,
                f"another refresh committed to the stored result first ({err}); nothing was written",
                "run the refresh again",
            ) from None
        steps.reached("committed")
        with phases("publish"):
            attempt.publish(result)
        return rows
    finally:
        bindings.close()


def reused_analysis(attempt: Attempt) -> Optional[MaintainedResult]:
    """The stored-result plan from an analysis Spark already made (Attempt.reusable_analysis):
    each analysis is a round trip over Connect and Thrift. None when there is none, or when it
    lacks an aggregate argument's type this release's plan needs."""
    cached = attempt.reusable_analysis()
    plan = attempt.plan
    if cached is None or plan.tree is None:
        return None
    result = attempt.stored_layout(list(cached["names"]))
    types = dict(cached.get("arg_types") or {})
    if any(name not in types for name, _ in result.typed_args()):
        return None
    result.arg_types = types
    return result


def typed(conn: Connection, result: MaintainedResult, bindings: Bindings) -> MaintainedResult:
    """Give the plan the Spark types of the aggregate arguments it needs (analysis only, no job)."""
    wanted = result.typed_args()
    if wanted:
        query = result.args_query(bindings.context(set()))
        types = [c.type for c in conn.output_columns(render(query))]
        result.arg_types = {name: t for (name, _), t in zip(wanted, types)}
    return result


def bind_plain_query(plan: Plan, bindings: Bindings) -> exp.Expr:
    """The model's own SQL with each source bound to its snapshot at the pinned new version."""
    ctes = {c.alias_or_name.lower() for c in plan.query.find_all(exp.CTE)}

    def bind(node):
        if isinstance(node, exp.Table) and node.name and not (not node.db and node.name.lower() in ctes):
            relation = relation_name(node)
            if relation in plan.pinned:
                return exp.alias_(bindings.snapshot(relation, "new"), node.alias_or_name, table=True)
        return node

    return plan.query.copy().transform(bind)


def output_names(conn: Connection, model: str, plan: Plan, bindings: Bindings) -> list:
    """The columns Spark gives the query (names like `count(1)` included), from analysis only."""
    try:
        return [c.name for c in conn.output_columns(spark_sql(bind_plain_query(plan, bindings)))]
    except Exception as err:  # noqa: BLE001 - Spark's analysis error is the message the user needs
        raise StreamTableError(
            model, f"Spark rejects the query: {str(err).splitlines()[0][:400]}", "fix the model SQL"
        ) from None
