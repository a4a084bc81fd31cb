"""One attempt at a refresh: what it knows before any data is read (the plan, the stored
result's metadata, the session's settings), and what every mode does with it: the metadata it
commits with the rows, the stored layout, publishing the views.

A refresh that loses a commit race starts a new attempt (run.py); nothing here outlives one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Optional

from sqlglot import exp

from python_helpers.dvm.sqlgen import Context, render
from python_helpers.dvm.stored_result import MaintainedResult, StoredResult, plan_stored_result
from python_helpers.runtime.connections import trace
from python_helpers.runtime.connections.base import Connection
from python_helpers.runtime.delta import metadata as metadata_format
from python_helpers.runtime.delta.base import DeltaEngine
from python_helpers.runtime.refresh import costs, steps
from python_helpers.runtime.refresh.auto import READ_COST
from python_helpers.runtime.refresh.planning import Plan
from python_helpers.runtime.refresh.requests import Log, RefreshRequest
from python_helpers.runtime.refresh.settings import changed_setting
from python_helpers.runtime.refresh.timing import Phases


@dataclass
class Attempt:
    delta: DeltaEngine  # Delta, through the engine the profile chose (runtime/delta/choose.py)
    request: RefreshRequest
    plan: Plan
    target: str  # the stored result's Delta path
    meta: Optional[dict]  # the stored result's metadata as the last refresh committed it
    print_fp: str  # fingerprint of the definition the stored result is built from
    session: dict  # the Spark settings results depend on (runtime/refresh/settings.py)
    schema_now: dict  # the source columns read, with their types (decide.read_schema)
    phases: Phases
    log: Log
    counters: dict = field(default_factory=dict)  # reported in the result (adapter_response)
    started_ms: int = 0  # wall clock at the attempt's start (costs.py: the refresh's length)
    change_rows: Optional[int] = None  # counted from the Delta logs (a differential refresh)
    full_reason: Optional[str] = None  # why a full refresh runs
    full_rule: Optional[str] = None  # which of auto's rules sent it to full (auto.py), if one did
    # Spark's analysis of the query as this attempt's differential refresh made it ({names,
    # arg_types}), for the full refresh `auto` falls back to on the same sources.
    analysis: Optional[dict] = None
    statements_from: int = 0  # statements the connection had sent before this attempt (trace.py)

    @property
    def model(self) -> str:
        return self.request.model

    @property
    def conn(self) -> Connection:
        """Spark, through the connection's binding (runtime/connections/)."""
        return self.delta.conn

    def statements_sent(self) -> int:
        """Statements this attempt has had Spark analyse so far (connections/trace.py)."""
        return trace.statements_sent(self.conn) - self.statements_from

    def metadata(self, mode: str, result: Optional[StoredResult]) -> dict:
        """What the storage commit records beside the rows (offsets first of all)."""
        previous = self.meta or {}
        plan = plan_digest(result) if isinstance(result, MaintainedResult) else None
        meta = {
            "format": metadata_format.FORMAT_VERSION,
            "model": self.model,
            "fingerprint": self.print_fp,
            "mode": mode,
            "layout": result.kind if result is not None else "recompute",
            "plan": plan,
            "offsets": {
                r: {
                    "version": s.state.version,
                    "table_id": s.state.table_id,
                    "path": s.path,
                    # the commit consumed, so the next refresh can tell a replaced log from a newer one
                    "commit": self.delta.commit_digest(s.path, s.state.version),
                    # what the spark engine would otherwise ask DESCRIBE DETAIL again in the next
                    # run's process (runtime/delta/spark/identity.py)
                    "cdf": s.state.cdf_enabled,
                    "partition_columns": list(s.state.partition_columns),
                }
                for r, s in self.plan.pinned.items()
            },
            "settings": self.session,
            "read_schema": self.schema_now,
            # differential refreshes since the last full one (float_recompute_every counts them)
            "differential_since_full": previous.get("differential_since_full", 0) + 1 if mode == "differential" else 0,
            # what the last refreshes cost, this one's length completed by the next (costs.py)
            # Refreshes of another plan (an earlier release maintained the query another way)
            # say nothing of this one's cost: its history starts again.
            "history": costs.extended(
                self.meta if previous.get("plan") == plan else None,
                costs.entry(
                    mode,
                    self.started_ms,
                    self.change_rows,  # counted by a differential refresh, also when it gave way to full
                    self.full_reason if mode == "full" else None,
                    self.phases.seconds,
                    self.request.invocation_id,
                    rule=self.full_rule if mode == "full" else None,
                    # the estimate of a differential refresh too: auto learns from what it then took
                    read_ratio_pct=self.counters.get("read_ratio_pct")
                    if mode == "differential" or self.full_rule == READ_COST
                    else None,
                    read_bar_pct=self.counters.get("read_bar_pct") if self.full_rule == READ_COST else None,
                    reads=self.counters if mode == "differential" else None,
                    statements=self.statements_sent(),
                ),
            ),
        }
        if isinstance(result, MaintainedResult) and self.plan.tree is not None:
            # What Spark's analyser said of the query, for the source schemas it saw: the stored
            # state was laid out by it, and the next refresh reuses it instead of asking again.
            meta["analysis"] = {
                "sources": schema_key(self.plan),
                "names": list(result.output_names),
                "arg_types": dict(result.arg_types),
            }
        return meta

    def stored_layout(self, names: list) -> MaintainedResult:
        """The stored-result plan of this attempt's query with output `names` (the one place that
        hands the model's unique_key and whether the engine keeps row ids to plan_stored_result)."""
        assert self.plan.tree is not None, "only a query with an operator tree has a stored layout"
        return plan_stored_result(
            self.model,
            self.plan.tree,
            list(names),
            self.plan.top_k,
            self.request.unique_key,
            self.delta.keeps_row_ids,
        )

    def stored_result_from_meta(self) -> MaintainedResult:
        """The stored layout as the last refresh recorded it (no Spark analysis)."""
        assert self.plan.tree is not None, "only a maintained result records its analysis"
        cached = (self.meta or {}).get("analysis") or {}
        result = self.stored_layout(cached["names"])
        result.arg_types = dict(cached.get("arg_types") or {})
        return result

    def reusable_analysis(self) -> Optional[dict]:
        """Spark's analysis of the query ({names, arg_types}) where it holds for this attempt's
        sources and settings without asking Spark again: this attempt's own (a differential
        refresh that gave way), or the last refresh's when the definition, the settings that
        change results and the source schemas are the ones it saw."""
        if self.plan.tree is None:
            return None
        if self.analysis is not None:
            return self.analysis
        meta = self.meta or {}
        cached = meta.get("analysis") or {}
        if (
            cached.get("sources") == schema_key(self.plan)
            and meta.get("fingerprint") == self.print_fp
            and meta.get("settings") is not None
            and changed_setting(meta.get("settings"), self.session) is None
        ):
            return cached
        return None

    def publish(self, result: StoredResult) -> None:
        steps.reached("publishing")
        self.delta.publish(self.request, self.plan, self.target, result.view_sql, self.log)
        steps.reached("published")
        self.delta.tidy(self.target, self.request.retention_hours, self.log, self.model)


# The relations the digest renders over (never read: the SQL is only hashed).
DIGEST_PREFIX = "__dvm_digest_"


def plan_digest(result: MaintainedResult) -> str:
    """What the stored state means: the result's full build rendered over abstract relations (the
    rewrites, the operator tree, the state columns and how each is computed). A release that
    maintains the query another way has another digest, and the next refresh rebuilds once
    instead of applying new delta rules to state the old ones kept."""
    abstract = Context(
        changes=lambda r: exp.to_table(f"{DIGEST_PREFIX}changes_{r.replace('.', '_')}"),
        snapshot=lambda r, v: exp.to_table(f"{DIGEST_PREFIX}{v}_{r.replace('.', '_')}"),
    )
    text = f"{result.kind}|{','.join(result.storage_columns())}|{render(result.full_sql(abstract))}"
    return f"{result.kind}:{hashlib.md5(text.encode()).hexdigest()[:16]}"


def schema_key(plan: Plan) -> str:
    """A digest of the source schemas the plan read (the analysis is reused while it holds)."""
    schemas = {r: s.spark_types for r, s in sorted(plan.pinned.items())}
    return hashlib.md5(json.dumps(schemas, sort_keys=True).encode()).hexdigest()
