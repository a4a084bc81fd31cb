"""Deciding a refresh's mode: differential, or full and why.

Everything here reads what planning found and what the last refresh recorded in its commit;
nothing reads data. A full refresh caused by something the user should know about (the model
changed, a source was recreated, a setting changed) is a warning; one the user asked for is not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from python_helpers.dvm.stored_result import KEY_TYPE
from python_helpers.errors import ChangeFeedDisabled, SourceBehind
from python_helpers.runtime.delta import metadata as metadata_format
from python_helpers.runtime.refresh import settings as result_settings


@dataclass(frozen=True)
class Decision:
    mode: str  # "differential" | "full"
    reason: Optional[str] = None  # why full
    warn: bool = False  # the reason deserves a warning (the user did not ask for it)

    @staticmethod
    def full(reason: str, warn: bool = False) -> "Decision":
        return Decision("full", reason, warn)


DIFFERENTIAL = Decision("differential")


def read_schema(plan) -> dict:
    """{relation: {column: "type[ not null]"}} of the source columns the query reads."""
    out = {}
    for relation, src in sorted(plan.pinned.items()):
        fields = {f.name: f for f in src.state.arrow_schema}
        types = src.spark_types
        out[relation] = {
            c: types[c] + ("" if fields[c].nullable else " not null")
            for c in plan.columns.get(relation, [])
            if c in types
        }
    return out


def _schema_change(old: Optional[dict], new: dict) -> Optional[str]:
    """A sentence naming the first read column whose type changed, or that appeared/disappeared."""
    if old is None:
        return None
    for relation in sorted(set(old) & set(new)):
        before, after = old[relation], new[relation]
        for column in sorted(set(before) | set(after)):
            if column not in after:
                return f"column {column} of source {relation} is no longer read or no longer exists"
            if column not in before:
                return f"source {relation} has a column {column} the query now reads (the source's schema changed)"
            if before[column] != after[column]:
                return (
                    f"column {column} of source {relation} changed type from {before[column]} to {after[column]} "
                    "since the last refresh"
                )
    return None


def decide(request, plan, meta: Optional[dict], print_fp: str, session: dict, schema_now: dict) -> Decision:
    if plan.unsupported is not None:
        if request.refresh_mode == "differential":
            raise plan.unsupported
        return Decision.full(f"not differentiable: {plan.unsupported.construct}", warn=True)
    if request.full_refresh:
        return Decision.full("--full-refresh")
    if request.refresh_mode == "full":
        return Decision.full("refresh_mode='full'")
    if meta is None:
        return Decision.full("first build")
    if meta.get("format") != metadata_format.FORMAT_VERSION:
        return Decision.full("the stored result was written by another version of dbt-spark-stream", warn=True)
    foreign = meta.get("foreign_commits")
    if foreign:
        done = ", ".join(f"{c['operation']} at version {c['version']}" for c in foreign[:3])
        return Decision.full(
            f"the stored result was changed outside dbt-spark-stream ({done}); it is rebuilt from its sources",
            warn=True,
        )
    if meta.get("fingerprint") != print_fp:
        return Decision.full(
            "the model's SQL or result-shaping config changed since the last refresh; rebuilt from scratch", warn=True
        )
    changed = result_settings.changed_setting(meta.get("settings"), session)
    if changed:
        return Decision.full(changed, warn=True)
    for_sources = _source_decision(request, plan, meta)
    if for_sources is not None:
        return for_sources
    schema_change = _schema_change(meta.get("read_schema"), schema_now)
    if schema_change:
        return Decision.full(schema_change + "; the stored state no longer fits it", warn=True)
    if _float_recompute_due(request, meta):
        return Decision.full(
            f"periodic recompute of floating-point aggregates (float_recompute_every={request.float_recompute_every})"
        )
    return DIFFERENTIAL


def _source_decision(request, plan, meta: dict) -> Optional[Decision]:
    model = request.model
    for relation, src in plan.pinned.items():
        if not src.state.cdf_enabled:
            err = ChangeFeedDisabled(model, relation, src.path)
            if request.refresh_mode == "differential":
                raise err
            return Decision.full(f"{err.problem}; {err.fix}", warn=True)
        old = meta.get("offsets", {}).get(relation)
        if old is None:
            return Decision.full(f"source {relation} was not read by the previous refresh", warn=True)
        if old.get("table_id") != src.state.table_id:
            return Decision.full(
                f"source {relation} was recreated since the last refresh (its Delta table id changed)", warn=True
            )
        if old["version"] > src.state.version:
            raise _behind(model, relation, src, old["version"])
        if old.get("commit") and src.consumed_commit is not None and src.consumed_commit != old["commit"]:
            return Decision.full(
                f"the Delta log of source {relation} was replaced since the last refresh (its commit at version "
                f"{old['version']}, which that refresh consumed, is not the same commit any more)",
                warn=True,
            )
    return None


def _behind(model: str, relation: str, src, consumed: int) -> SourceBehind:
    """Offsets only move forward: reading an older version would re-apply changes."""
    if src.pinned_by:
        return SourceBehind(
            model,
            f"source {relation} would be read at version {src.state.version}, the version the upstream "
            f"stream table {src.pinned_by} was refreshed to, but this stream table already consumed "
            f"version {consumed}; nothing was changed",
            f"refresh {src.pinned_by} first (dbt run does, in dependency order; it may have failed in this run)",
        )
    return SourceBehind(
        model,
        f"source {relation} is at version {src.state.version}, older than version {consumed} this stream "
        "table already consumed (was its Delta log replaced?); nothing was changed",
        "run dbt run --full-refresh for this model to rebuild it from the source as it is now",
    )


def _float_recompute_due(request, meta: dict) -> bool:
    every = request.float_recompute_every
    if not every:
        return False
    arg_types = (meta.get("analysis") or {}).get("arg_types") or {}
    # Aggregate arguments only: a keyed result keeps its key columns' types there too.
    floats = any(t in ("double", "float") for n, t in arg_types.items() if not n.startswith(KEY_TYPE))
    return floats and meta.get("differential_since_full", 0) >= every
