"""FULL vs DIFFERENTIAL through `dbt run` (fresh process per run): the headline benchmark.

Called by `benchmarks/run_tpch.py --via dbt` (the default); see that file for the command.
For each cycle and change mix (TPC-H refresh functions; scattered updates) it changes the
sources, runs the differential models (`dbt run -s tag:diff`) and the full twins
(`dbt run -s tag:full --full-refresh`) on the same source versions, the differential run first
in odd cycles and second in even ones, and checks both equal.
Per model: dbt's execution_time (less the metering's own REST calls), the refresh mode, Spark
jobs and rows read (Spark's REST API),
snapshot files skipped by statistics; per run: wall time and peak memory of dbt + Spark.
With a local session (a fresh JVM per run), every run first builds a small `table` model that
warms the JVM up (tpch_dbt.WARMUP_SQL, not reported; `--no-warmup` leaves it out), so the
warm-up lands on no measured model.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.tpch_dbt import WARMUP_SQL, DbtBench, check_equal, engine_spark_conf, linked_copy  # noqa: E402
from python_helpers.testing.tpch_data import RefreshFunctions, ScatteredUpdates, build  # noqa: E402

HEADLINE = ("q01", "q03", "q05", "q06", "q12")


def _queries(selection: str) -> dict:
    from python_helpers.testing.tpch_queries import QUERIES

    names = list(QUERIES) if selection == "all" else [q.strip() for q in selection.split(",") if q.strip()]
    names = [q for q in HEADLINE if q in names] + [q for q in names if q not in HEADLINE]
    return {q: QUERIES[q] for q in names}


def run(args, machine: str) -> int:
    work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="dvm-dbt-bench-"))
    os.makedirs(work, exist_ok=True)
    queries = _queries(args.queries)
    data_root = os.path.join(args.data or os.path.join(ROOT, ".work", "tpch"), f"sf{args.sf:g}")
    started = time.perf_counter()
    pristine = build(args.sf, data_root, log=lambda t: print(t, flush=True))
    print(f"TPC-H sf={args.sf:g} ready in {time.perf_counter() - started:.0f}s (cached in {data_root})", flush=True)
    lake = os.path.join(work, "lake")
    linked_copy(os.path.join(data_root, "tpch.db"), lake)
    paths = {r: os.path.join(lake, r.split(".")[1]) for r in pristine}
    server = None
    spark_conf = engine_spark_conf(args.engine)  # Delta Lake's, loaded into the session or the server
    if spark_conf is None:
        return 1
    if args.spark == "connect":
        from python_helpers.testing.local_spark import ConnectServer

        server = ConnectServer(
            os.path.join(work, "server"), warehouse=os.path.join(work, "warehouse"), memory="10g", extra_conf=spark_conf
        ).start()
    try:
        bench = DbtBench(
            work,
            paths,
            queries,
            spark_mode=args.spark,
            remote=server.remote if server else "",
            ui_url=server.ui_url if server else "",
            driver_memory=args.driver_memory,
            engine=args.engine,
            spark_conf={} if server else spark_conf,
            # A fresh JVM per run (session): no model pays its warm-up for the run.
            warmup=WARMUP_SQL if args.spark == "session" and not args.no_warmup else "",
        )
        bench.write()
        built = bench.dbt("run")
        if not built.ok:
            print(built.message, file=sys.stderr)
            return 1
        print(f"built {2 * len(queries)} stream tables in {built.wall:.0f}s", flush=True)
        orders = max(1, int(1_500_000 * args.sf * args.rf_fraction))
        mixes: dict[str, RefreshFunctions | ScatteredUpdates] = {
            "rf": RefreshFunctions(paths, orders),
            "scattered": ScatteredUpdates(paths, rows=args.scattered_rows),
        }
        chosen = [m.strip() for m in args.mixes.split(",") if m.strip()]
        records: dict[str, list[tuple]] = {m: [] for m in chosen}
        report = ""
        for cycle in range(1, args.cycles + 1):
            for mix in chosen:
                done = mixes[mix].apply()
                # The run that meets the changed sources first pays for it (the first reads of
                # the new files, the source views re-pointed): the order alternates by cycle,
                # so neither side always pays.
                if cycle % 2:
                    diff = bench.dbt("run", "--select", "tag:diff")
                    full = bench.dbt("run", "--select", "tag:full", "--full-refresh")
                else:
                    full = bench.dbt("run", "--select", "tag:full", "--full-refresh")
                    diff = bench.dbt("run", "--select", "tag:diff")
                if not (diff.ok and full.ok):
                    print((diff.message or full.message), file=sys.stderr)
                    return 1
                equal = check_equal(bench, list(queries))
                # The same run again with no source moved: the fixed cost of a refresh with
                # nothing to do, as a scheduled `dbt run` meets it.
                idle = bench.dbt("run", "--select", "tag:diff")
                if not idle.ok:
                    print(idle.message, file=sys.stderr)
                    return 1
                records[mix].append((diff, full, equal, idle))
                print(
                    f"cycle {cycle} {mixes[mix].name} ({done}): differential run {diff.wall:.1f}s, "
                    f"full run {full.wall:.1f}s, equal: {all(equal.values())}",
                    flush=True,
                )
                for q in queries:
                    d, f = diff.models[q], full.models[f"{q}_full"]
                    print(
                        f"  {q}: full {f.seconds:.2f}s, {d.mode} {d.seconds:.2f}s "
                        f"({d.counters.get('spark_jobs', '?')} jobs, {_n(d.counters.get('rows_read'))} rows read; "
                        f"full {f.counters.get('spark_jobs', '?')} jobs, {_n(f.counters.get('rows_read'))}); "
                        f"{'equal' if equal[q] else 'DIFFERENT'}; nothing to do {idle.models[q].seconds:.2f}s",
                        flush=True,
                    )
                    if d.mode == "full":  # the same rebuild as its twin's: where the time differs
                        print(f"    phases: {_phases(d)} | twin {_phases(f)}", flush=True)
                if not all(equal.values()):
                    print("!! a differential result differs from its full twin", file=sys.stderr)
                    return 1
                # Written after every mix, so a run cut short keeps what it measured.
                report = _write(args, machine, queries, records, mixes)
        print()
        print(report)
        return 0
    finally:
        if server is not None:
            server.stop()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


def _phases(run) -> str:
    shown = " ".join(f"{k} {v:.2f}" for k, v in run.phases.items())
    return f"{shown} dbt {run.seconds - sum(run.phases.values()):.2f}"


def _write(args, machine: str, queries: dict, records: dict, mixes: dict) -> str:
    report = _report(args, machine, queries, records, mixes)
    os.makedirs(args.out, exist_ok=True)
    suffix = "_all" if args.queries == "all" else ""
    if args.rf_fraction != 0.001:  # a larger change gets its own report beside the default one
        suffix += f"_rf{args.rf_fraction * 100:g}pct"
    engine = "_spark_engine" if args.engine == "spark" else ""
    stem = os.path.join(args.out, f"tpch_dbt_{args.spark}{engine}_sf{args.sf:g}{suffix}")
    with open(stem + ".md", "w") as handle:
        handle.write(report + "\n")
    title = f"TPC-H SF {args.sf:g} through dbt ({args.spark}, {args.engine} engine)"
    _chart(queries, records, mixes, stem + ".png", title)
    print(f"wrote {stem}.md and {stem}.png", flush=True)
    return report


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _report(args, machine: str, queries: dict, records: dict, mixes: dict) -> str:
    if args.spark == "session":
        spark = f"a fresh local Spark per run, {args.driver_memory} heap"
    else:
        spark = "a long-lived Spark Connect server"
    lines = [
        f"TPC-H SF {args.sf:g} through `dbt run` ({args.spark}: {spark}), engine `{args.engine}`, "
        f"{args.cycles} cycle(s); medians. "
        f"Machine: {machine}.",
        "",
    ]
    for mix, rows in records.items():
        if not rows:
            continue
        lines += [
            f"**{mixes[mix].name}** ("
            + (
                f"{mixes[mix].orders} orders in, as many out"
                if mix == "rf"
                else f"{mixes[mix].rows} lineitem rows and their orders updated"
            )
            + ")",
            "",
            "| query | FULL (s) | DIFFERENTIAL (s) | FULL / DIFF | mode | jobs FULL / DIFF "
            "| rows read FULL / DIFF | snapshot files read / skipped | nothing to do (s) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for q in queries:
            f = _median([r[1].models[f"{q}_full"].seconds for r in rows])
            d = _median([r[0].models[q].seconds for r in rows])
            modes = ", ".join(sorted({r[0].models[q].mode for r in rows}))
            jf = _median([r[1].models[f"{q}_full"].counters.get("spark_jobs") for r in rows])
            jd = _median([r[0].models[q].counters.get("spark_jobs") for r in rows])
            bf = _median([r[1].models[f"{q}_full"].counters.get("rows_read") for r in rows])
            bd = _median([r[0].models[q].counters.get("rows_read") for r in rows])
            fr = _median([r[0].models[q].counters.get("files_read") for r in rows])
            fs = _median([r[0].models[q].counters.get("files_skipped") for r in rows])
            idle = _median([r[3].models[q].seconds for r in rows])
            lines.append(
                f"| {q} | {f:.2f} | {d:.2f} | {f / d:.1f}x | {modes} | {_n(jf)} / {_n(jd)} | "
                f"{_n(bf)} / {_n(bd)} | {_n(fr)} / {_n(fs)} | {idle:.2f} |"
            )
        lines += _phase_table(queries, rows)
        lines += _after_learning(queries, records, mix)
        dw = _median([r[0].wall for r in rows])
        fw = _median([r[1].wall for r in rows])
        dm = max(r[0].peak_rss_mib for r in rows)
        fm = max(r[1].peak_rss_mib for r in rows)
        do = max(r[0].peak_dbt_mib for r in rows)
        fo = max(r[1].peak_dbt_mib for r in rows)
        lines += [
            "",
            f"Whole `dbt run`: FULL {fw:.1f}s, DIFFERENTIAL {dw:.1f}s ({fw / dw:.1f}x); peak resident memory "
            f"of dbt and Spark: FULL {fm:.0f} MiB, DIFFERENTIAL {dm:.0f} MiB; of the dbt process alone: "
            f"FULL {fo:.0f} MiB, DIFFERENTIAL {do:.0f} MiB.",
            "",
        ]
    return "\n".join(lines)


# `auto` learns from a model's own refreshes: the target is judged on what follows the first two.
LEARNING_REFRESHES = 2
# ...and is "no model more than 10% slower than its own full refresh".
SLOWER_BOUND = 1.10


def _after_learning(queries: dict, records: dict, mix: str) -> list:
    """The slowest DIFFERENTIAL / FULL of each model in this mix's cycles after its first
    LEARNING_REFRESHES refreshes (counted over both mixes, in the order they ran)."""
    order = list(records)
    late = [r for cycle, r in enumerate(records[mix]) if cycle * len(order) + order.index(mix) + 1 > LEARNING_REFRESHES]
    if not late:
        return ["", f"(No cycle after the first {LEARNING_REFRESHES} refreshes: run more cycles to judge `auto`.)"]
    worst = {
        q: max((r[0].models[q].seconds / r[1].models[f"{q}_full"].seconds, r[0].models[q].mode) for r in late)
        for q in queries
    }
    # A model `auto` sent to full compares one rebuild with another: its ratio is the run-to-run
    # spread of a rebuild, not a differential refresh that lost, so the list says which is which.
    over = [
        f"{q} {w:.2f}" + (" (in full)" if mode == "full" else "") for q, (w, mode) in worst.items() if w > SLOWER_BOUND
    ]
    return [
        "",
        f"After each model's first {LEARNING_REFRESHES} refreshes ({len(late)} cycle(s) of this mix): "
        f"{len(queries) - len(over)} of {len(queries)} models refreshed at most {SLOWER_BOUND:.2f}x their full "
        f"refresh's time in every cycle" + (f"; slower: {', '.join(over)} (DIFFERENTIAL / FULL)." if over else "."),
    ]


# The refresh's phases in the order they run (runtime/refresh/run.py): a differential refresh's,
# then a full one's (a model `auto` sends to full after its estimate has both). The rest of
# dbt's execution_time is dbt's own work around the materialization (compile, macros, catalog).
_PHASES = ("plan", "changes", "analyze", "delta", "merge", "compute", "write", "publish")


def _phase_table(queries: dict, rows: list) -> list:
    """Where each differential model's time goes (medians over cycles): the profile of what
    bounds the ratio, beside the ratio itself. Only the phases some model ran get a column."""
    runs = {q: [r[0].models[q] for r in rows] for q in queries}
    shown = [p for p in _PHASES if any(p in m.phases for ms in runs.values() for m in ms)]
    lines = [
        "",
        "Where the DIFFERENTIAL time goes (seconds, medians; `dbt` is execution_time minus the phases):",
        "",
        "| query | " + " | ".join(shown) + " | dbt |",
        "|---|" + "---|" * (len(shown) + 1),
    ]
    for q, ms in runs.items():
        cells = [_median([m.phases.get(p, 0.0) for m in ms]) or 0.0 for p in shown]
        rest = _median([m.seconds - sum(m.phases.values()) for m in ms]) or 0.0
        lines.append(f"| {q} | " + " | ".join(f"{c:.2f}" for c in cells) + f" | {rest:.2f} |")
    return lines


def _n(v) -> str:
    return "?" if v is None else f"{v:.0f}"


def _chart(queries: dict, records: dict, mixes: dict, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [m for m in records if records[m]]
    fig, axes = plt.subplots(1, len(shown), figsize=(7 * len(shown), 4.2), squeeze=False)
    for ax, mix in zip(axes[0], shown):
        rows = records[mix]
        names = list(queries)
        full = [_median([r[1].models[f"{q}_full"].seconds for r in rows]) for q in names]
        diff = [_median([r[0].models[q].seconds for r in rows]) for q in names]
        x = range(len(names))
        ax.bar([i - 0.2 for i in x], full, width=0.4, label="FULL (dbt run --full-refresh)")
        ax.bar([i + 0.2 for i in x], diff, width=0.4, label="DIFFERENTIAL (dbt run)")
        for i, (f, d) in enumerate(zip(full, diff)):
            ax.text(i, max(f, d) * 1.02, f"{f / d:.0f}x", ha="center", fontsize=8)
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=45 if len(names) > 6 else 0)
        ax.set_ylabel("dbt execution_time, seconds (median)")
        ax.set_title(f"{title}: {mixes[mix].name}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
