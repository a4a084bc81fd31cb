"""Read what a `dbt run` of stream tables reported, from target/run_results.json.

The spark_stream adapter puts `mode`, `rows_changed`, `seconds`, `reason` and `engine` of every refresh
into each result's `adapter_response`; other models (views, tests) have none of them.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path


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


def format_benefit(first: dict, second: dict) -> str:
    """Per stream table: its full build (first run) beside its differential refresh (second
    run), in dbt's execution_time, and how many times faster the refresh was; a model whose
    second refresh was not differential says what it was instead."""
    rows = [["model", "full build s", "differential s", "faster", "rows changed"]]
    ratios = []
    for model in sorted(set(first) & set(second)):
        built, refreshed = first[model], second[model]
        if built["mode"] != "full" or not built.get("execution_time") or not refreshed.get("execution_time"):
            continue
        full_s, diff_s = built["execution_time"], refreshed["execution_time"]
        if refreshed["mode"] == "differential":
            ratios.append(full_s / diff_s)
            faster = f"{full_s / diff_s:.1f}x"
        else:
            faster = f"({refreshed['mode'] or refreshed['status']})"
        rows.append([model, f"{full_s:.2f}", f"{diff_s:.2f}", faster, str(refreshed["rows_changed"])])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if ratios:
        ratios.sort()
        median = statistics.median(ratios)
        lines += [
            "",
            f"{len(ratios)} differential refreshes: median {median:.1f}x faster than the full build "
            f"(from {ratios[0]:.1f}x to {ratios[-1]:.1f}x); {sum(r > 1 for r in ratios)} of them faster",
        ]
    return "\n".join(lines)
