"""Read what a `dbt run` of stream tables reported, from target/run_results.json.

The spark_stream adapter puts `mode`, `rows_changed`, `seconds`, `reason` and `engine` of every refresh
into each result's `adapter_response`; other models (views, tests) have none of them.
"""

from __future__ import annotations

import json
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
