"""Read what a `dbt run` of stream tables reported, from target/run_results.json.

The spark_stream adapter puts `mode`, `rows_changed`, `seconds`, `reason` and `engine` of every refresh
into each result's `adapter_response`; other models (views, tests) have none of them.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

# `auto`'s own bar: a refresh this much slower than the model's full build is one it should
# have run in full, once it has the history to tell.
from python_helpers.runtime.refresh.auto import SLOWER_THAN_FULL as SLOWER_THAN_BUILD


def load(project_dir) -> dict:
    with open(Path(project_dir) / "target" / "run_results.json", encoding="utf-8") as f:
        return json.load(f)


def refreshes(run_results: dict) -> dict:
    """model name -> {status, mode, rows_changed, seconds, reason, message} of each stream table
    (and of every model that failed, whose materialization run_results does not tell)."""
    out = {}
    for result in run_results["results"]:
        response = result.get("adapter_response") or {}
        if not result["unique_id"].startswith("model."):
            continue
        if "mode" not in response and result["status"] not in ("error", "fail"):
            continue  # a model of another materialization (an errored one is shown anyway)
        name = result["unique_id"].split(".")[-1]
        out[name] = {
            "status": result["status"],
            "mode": response.get("mode"),
            "rows_changed": response.get("rows_changed"),
            "seconds": response.get("seconds"),
            "reason": response.get("reason"),
            "counters": response.get("counters") or {},
            "engine": response.get("engine"),
            "message": result.get("message") or "",
            "execution_time": result.get("execution_time"),  # dbt's own, the model's whole run
        }
    return out


def is_hook(unique_id: str) -> bool:
    """A project hook's result (on-run-start / on-run-end: status "success", never "pass")."""
    return unique_id.startswith("operation.")


def warm_up_seconds(run_results: dict) -> float:
    """Seconds the run's on-run-start hooks took (the demo's JVM warm-up), 0.0 without any."""
    return sum(
        float(r.get("execution_time") or 0.0)
        for r in run_results["results"]
        if is_hook(r["unique_id"]) and "on-run-start" in r["unique_id"]
    )


def format_table(runs: list) -> str:
    """A text table: one row per stream table, one column group per (label, refreshes) run."""
    models = sorted({m for _, r in runs for m in r})
    header = ["model"]
    for label, _ in runs:
        header += [f"{label}: mode", "rows changed", "seconds"]
    rows = [header]
    for model in models:
        row = [model]
        for _, refresh in runs:
            info = refresh.get(model)
            if info is None:
                row += ["-", "-", "-"]
            elif info["mode"] is None:
                row += [info["status"], "-", "-"]
            else:
                row += [info["mode"], str(info["rows_changed"]), f"{info['seconds']:.2f}"]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes = []
    for label, refresh in runs:
        by_reason: dict = {}
        for model, info in sorted(refresh.items()):
            if info.get("reason"):
                by_reason.setdefault(info["reason"], []).append(model)
        notes += [f"  {label}, {reason}: {', '.join(models)}" for reason, models in by_reason.items()]
    if notes:
        lines += ["", "why a refresh ran in full:"] + notes
    return "\n".join(lines)


def format_benefit(first: dict, *later: dict) -> str:
    """Per stream table: its full build (first run) beside each later refresh, in dbt's
    execution_time, and how many times faster each was than the build; a refresh that ran in
    full says so in its column. One summary line per later run."""
    header = ["model", "full build s"]
    for i in range(len(later)):
        n = f" {i + 1}" if len(later) > 1 else ""
        header += [f"refresh{n} s", "faster"]
    rows = [header + ["rows changed"]]
    stats: list = [{"ratios": [], "full": [], "slower": []} for _ in later]
    for model in sorted(set(first).intersection(*later)):
        built = first[model]
        if built["mode"] != "full" or not built.get("execution_time"):
            continue
        full_s = built["execution_time"]
        row = [model, f"{full_s:.2f}"]
        for run, stat in zip(later, stats):
            refreshed = run[model]
            seconds = refreshed.get("execution_time")
            if not seconds:
                row += ["-", f"({refreshed['status']})"]
                continue
            ratio = full_s / seconds
            if refreshed["mode"] == "differential":
                stat["ratios"].append(ratio)
                row += [f"{seconds:.2f}", f"{ratio:.1f}x"]
                if ratio < 1 / SLOWER_THAN_BUILD:
                    stat["slower"].append(model)
            else:
                # A full refresh against the build: the same work, so only its time is told.
                stat["full"].append((model, seconds / full_s))
                row += [f"{seconds:.2f}", f"({refreshed['mode'] or refreshed['status']})"]
        rows.append(row + [str(later[-1][model]["rows_changed"])])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    for i, stat in enumerate(stats):
        label = f"refresh {i + 1}" if len(later) > 1 else "refresh"
        ratios = sorted(stat["ratios"])
        parts = []
        if ratios:
            slower = stat["slower"]
            parts.append(
                f"{len(ratios)} differential: median {statistics.median(ratios):.1f}x faster than the full build "
                f"(from {ratios[0]:.1f}x to {ratios[-1]:.1f}x), {sum(r > 1 for r in ratios)} of them faster, "
                f"{len(slower)} more than {SLOWER_THAN_BUILD:g}x slower" + (f" ({', '.join(slower)})" if slower else "")
            )
        if stat["full"]:
            times = ", ".join(f"{model} {share:.2f}x" for model, share in stat["full"])
            parts.append(f"{len(stat['full'])} in full, in this share of the build's time: {times}")
        lines.append(f"{label}: " + "; ".join(parts))
    return "\n".join(lines)
