"""FULL vs DIFFERENTIAL refresh on TPC-H, on the same data.

    .venv/bin/python benchmarks/run_tpch.py                          # through dbt, SF 1, both change mixes
    .venv/bin/python benchmarks/run_tpch.py --sf 10 --queries q01,q03,q05,q06,q12
    .venv/bin/python benchmarks/run_tpch.py --spark connect          # against a Spark Connect server
    .venv/bin/python benchmarks/run_tpch.py --via warm --sf 0.1 --cycles 2 --no-sweeps   # in-process

--via dbt (the default) measures what a scheduled job pays: every refresh is a `dbt run` in a
fresh process, timed by dbt (benchmarks/run_tpch_dbt.py has the details).

--via warm: for every query two stream tables are built over the same sources: one with
refresh_mode='full', one differential. Each cycle applies one change batch to lineitem and
orders (70% updates, 15% deletes, 15% inserts of changed rows), then refreshes both (the same
source versions), checks that they hold the same rows, and times each refresh (the refresh
only: Spark start, data generation and source changes are not timed).

Then, unless --no-sweeps:
* scale sweep: the differential refresh at other scale factors with the same change size
  (it should stay flat: its cost follows the change, not the table);
* change-rate sweep: growing fractions of lineitem changed at once, FULL vs DIFFERENTIAL
  (forced), to find where a full refresh becomes cheaper (what `auto_full_threshold` is for).

Prints tables and writes benchmarks/results/tpch_sf<sf>.{md,png}.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from python_helpers.testing.tpch_data import ChangeBatches, change_fraction, generate, lineitem_rows, load  # noqa: E402
from python_helpers.testing.tpch_queries import HEADLINE_QUERIES as QUERIES  # noqa: E402


def spark_session(work: str):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[*]")
        .appName("dbt-spark-stream-bench")
        .enableHiveSupport()
        .config("spark.sql.warehouse.dir", os.path.join(work, "warehouse"))
        .config(
            "spark.hadoop.javax.jdo.option.ConnectionURL",
            f"jdbc:derby:;databaseName={os.path.join(work, 'metastore_db')};create=true",
        )
        .config("spark.driver.memory", "8g")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def machine() -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores, {mem:.0f} GiB RAM, {platform.platform()}, Python {platform.python_version()}"


class PeakMemory:
    """Peak resident memory of the driver (the Python process and Spark's JVM, which in local
    mode is the whole of Spark), reset before and read after a measured section (Linux)."""

    def __init__(self, spark):
        self.pids = [os.getpid()]
        try:
            self.pids.append(int(spark._jvm.java.lang.ProcessHandle.current().pid()))
        except Exception:  # noqa: BLE001 - no JVM pid: Python only
            pass

    def reset(self) -> None:
        for pid in self.pids:
            try:
                with open(f"/proc/{pid}/clear_refs", "w") as handle:
                    handle.write("5")  # resets VmHWM to the current RSS
            except OSError:
                pass

    def peak_mib(self) -> dict:
        out = {}
        for name, pid in zip(("python", "jvm"), self.pids):
            try:
                with open(f"/proc/{pid}/status") as handle:
                    for line in handle:
                        if line.startswith("VmHWM:"):
                            out[name] = int(line.split()[1]) / 1024
            except OSError:
                pass
        return out


def rows_of(spark, view: str) -> Counter:
    return Counter(tuple(str(v) for v in r) for r in spark.sql(f"select * from {view}").collect())


def warm_queries() -> dict:
    """The warm benchmark's queries: its own five (q1, q3_nolimit, q5, q6, q12) and the 22 of
    TPC-H as the test suite runs them (q01 ... q22, `--queries all`)."""
    from python_helpers.testing.tpch_queries import QUERIES as TPCH

    return {**QUERIES, **{name: sql.replace("{src}", "tpch") for name, sql in TPCH.items()}}


class Bench:
    def __init__(self, spark, paths: dict, tag: str = ""):
        from python_helpers.runtime.api import RefreshRequest, refresh_stream_table

        self.spark, self.paths, self.tag = spark, paths, tag
        self.queries = warm_queries()
        self._request, self._refresh = RefreshRequest, refresh_stream_table

    def refresh(self, name: str, mode: str, **config):
        ident = f"{name}_{mode}{self.tag}"
        request = self._request(
            model=ident,
            schema="bench",
            identifier=ident,
            sql=self.queries[name],
            refresh_mode=mode,
            sources=dict(self.paths),
            **config,
        )
        return self._refresh(self.spark, request, log=lambda level, text: None)

    def same(self, name: str) -> bool:
        return rows_of(self.spark, f"bench.{name}_full{self.tag}") == rows_of(
            self.spark, f"bench.{name}_differential{self.tag}"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--via",
        choices=("dbt", "warm"),
        default="dbt",
        help="dbt: a `dbt run` per refresh (default); warm: refreshes in this process",
    )
    parser.add_argument(
        "--spark",
        choices=("session", "connect"),
        default="session",
        help="(--via dbt) a local session per run, or a long-lived Spark Connect server",
    )
    parser.add_argument(
        "--engine",
        choices=("embedded", "spark"),
        default="embedded",
        help="(--via dbt) the profile's Delta engine; spark loads Delta Lake (make jars)",
    )
    parser.add_argument("--mixes", default="rf,scattered", help="(--via dbt) change mixes: rf, scattered")
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="(--via dbt, session) no warm-up model first in each run (benchmarks/tpch_dbt.py)",
    )
    parser.add_argument(
        "--rf-fraction",
        type=float,
        default=0.001,
        help="(--via dbt) orders inserted and deleted per cycle, as a fraction of orders",
    )
    parser.add_argument(
        "--driver-memory",
        default="10g",
        help="(--via dbt --spark session) the local session's JVM heap, e.g. 2g to show a refresh fits it",
    )
    parser.add_argument("--scattered-rows", type=int, default=1000, help="(--via dbt) lineitem rows updated")
    parser.add_argument("--data", default=None, help="(--via dbt) where generated TPC-H is cached (.work/tpch)")
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (default 1)")
    parser.add_argument("--changes", type=int, default=1000, help="changed rows per cycle (default 1000)")
    parser.add_argument("--cycles", type=int, default=3, help="change cycles (default 3)")
    parser.add_argument(
        "--queries", default=None, help="comma-separated subset, or 'all' (default: the five headline queries)"
    )
    parser.add_argument("--no-sweeps", action="store_true", help="skip the scale and change-rate sweeps")
    parser.add_argument("--scales", default="0.1,0.3", help="other scale factors for the scale sweep")
    parser.add_argument(
        "--rates",
        default="0.0001,0.001,0.01,0.1,0.5",
        help="fractions of lineitem changed at once, for the change-rate sweep",
    )
    parser.add_argument("--scale-queries", default=None, help="queries of the scale sweep (default: --queries)")
    parser.add_argument("--rate-queries", default="q1,q6", help="queries of the change-rate sweep")
    parser.add_argument("--work", default=None, help="work directory (default: a temp dir, removed after)")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    args = parser.parse_args(argv)
    if args.via == "dbt":
        from benchmarks import run_tpch_dbt

        args.queries = args.queries or ",".join(run_tpch_dbt.HEADLINE)
        print(f"machine: {machine()}", flush=True)
        return run_tpch_dbt.run(args, machine())
    args.queries = args.queries or ",".join(QUERIES)
    every_query = args.queries == "all"
    if every_query:
        from python_helpers.testing.tpch_queries import QUERIES as TPCH

        args.queries = ",".join(TPCH)

    work = args.work or tempfile.mkdtemp(prefix="dvm-bench-")
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    scale_queries = [q.strip() for q in (args.scale_queries or args.queries).split(",") if q.strip()]
    rate_queries = [q.strip() for q in args.rate_queries.split(",") if q.strip()]
    print(f"machine: {machine()}", flush=True)
    spark = spark_session(work)
    memory = PeakMemory(spark)
    spark.sql("CREATE SCHEMA IF NOT EXISTS bench")
    paths = _load(spark, work, args.sf, "tpch")
    bench = Bench(spark, paths)

    results: dict[str, dict[str, Any]] = {
        q: {
            "build": None,
            "full": [],
            "differential": [],
            "noop": None,
            "modes": [],
            "phases": [],
            "rows": [],
            "read_ratio": [],
        }
        for q in queries
    }
    for q in queries:
        first = bench.refresh(q, "differential")
        bench.refresh(q, "full")
        results[q]["build"] = first.seconds
        noop = bench.refresh(q, "differential")
        results[q]["noop"] = noop.seconds
        print(
            f"{q}: initial build {first.seconds:.2f}s ({first.rows_changed} rows), "
            f"no-change refresh {noop.seconds * 1000:.0f}ms",
            flush=True,
        )
    changes = ChangeBatches(paths)
    peaks: dict[str, dict[str, float]] = {"full": {}, "differential": {}}
    for cycle in range(1, args.cycles + 1):
        done = changes.apply(args.changes)
        print(f"cycle {cycle}: changed sources ({done})", flush=True)
        for q in queries:
            memory.reset()
            full = bench.refresh(q, "full")
            _max_into(peaks["full"], memory.peak_mib())
            memory.reset()
            diff = bench.refresh(q, "differential")
            _max_into(peaks["differential"], memory.peak_mib())
            same = bench.same(q)
            r = results[q]
            r["full"].append(full.seconds)
            r["differential"].append(diff.seconds)
            r["modes"].append(diff.mode)
            r["phases"].append(diff.phases)
            r["rows"].append(diff.rows_changed)
            # the delta query's reads over a rebuild's (read_cost.py; what `auto` switches on)
            ratio = (diff.counters or {}).get("read_ratio_pct")
            r["read_ratio"].append(ratio / 100 if ratio is not None else None)
            r.setdefault("auto", []).append(_auto_pick(diff.counters or {}))
            print(
                f"  {q}: full {full.seconds:.2f}s, {diff.mode} {diff.seconds:.2f}s "
                f"({diff.rows_changed} rows changed; reads {_ratio(r['read_ratio'][-1])} of a rebuild's; "
                f"{_phases(diff.phases)}), equal={same}",
                flush=True,
            )
            if not same:
                print(f"  !! {q}: differential result differs from the full refresh", file=sys.stderr)
                return 1

    scale_rows, rate_rows = [], []
    if not args.no_sweeps:
        scale_rows = _scale_sweep(spark, work, args, scale_queries, results)
        rate_rows = _rate_sweep(bench, paths, args, rate_queries)
        if rate_rows is None:
            return 1

    report = _report(args, paths, queries, results, peaks, scale_rows, rate_rows)
    print()
    print(report)
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"tpch_sf{args.sf:g}" + ("_all" if every_query else ""))
    with open(stem + ".md", "w") as handle:
        handle.write(report + "\n")
    chart(
        results,
        queries,
        scale_rows,
        rate_rows,
        stem + ".png",
        f"TPC-H SF {args.sf:g}, {args.changes} changed rows per cycle",
    )
    print(f"\nwrote {stem}.md and {stem}.png")
    spark.stop()
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _load(spark, work: str, sf: float, schema: str) -> dict:
    t = time.perf_counter()
    data = generate(sf)
    print(f"dbgen sf={sf:g}: {data['lineitem'].num_rows} lineitem rows in {time.perf_counter() - t:.1f}s", flush=True)
    t = time.perf_counter()
    paths = load(data, os.path.join(work, "sources"), schema="tpch")
    print(f"loaded as Delta tables in {time.perf_counter() - t:.1f}s", flush=True)
    return paths


def _max_into(into: dict, values: dict) -> None:
    for k, v in values.items():
        into[k] = max(into.get(k, 0), v)


def _auto_pick(counters: dict) -> str:
    """What refresh_mode='auto' does with this refresh's read estimate (read_cost.py's rule)."""
    from python_helpers.runtime.refresh import read_cost

    if "read_ratio_pct" not in counters:
        return "differential"
    estimate = read_cost.ReadEstimate(counters.get("read_bytes", 0), counters.get("full_read_bytes", 0), 0)
    return "full" if estimate.full_reason() else "differential"


def _ratio(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _phases(phases: dict) -> str:
    return ", ".join(f"{k} {v * 1000:.0f}ms" for k, v in phases.items())


def _scale_sweep(spark, work: str, args, queries: list, results: dict) -> list:
    """Differential refresh time at other scale factors, same change size."""
    rows = []
    for sf in [float(x) for x in args.scales.split(",") if x.strip()]:
        sub = os.path.join(work, f"sf{sf:g}")
        paths = _load(spark, sub, sf, "tpch")
        bench = Bench(spark, paths, tag=f"_sf{str(sf).replace('.', '_')}")
        for q in queries:
            bench.refresh(q, "differential")
            bench.refresh(q, "full")
        changes = ChangeBatches(paths)
        times: dict[str, list[float]] = {q: [] for q in queries}
        for _ in range(args.cycles):
            changes.apply(args.changes)
            for q in queries:
                bench.refresh(q, "full")  # as in the main run, so both see the same per-version work
                times[q].append(bench.refresh(q, "differential").seconds)
        for q in queries:
            rows.append((q, sf, statistics.median(times[q])))
            print(f"  scale sweep {q} sf={sf:g}: differential {statistics.median(times[q]):.2f}s", flush=True)
    for q in queries:
        if q in results:  # the main run's own scale
            rows.append((q, args.sf, statistics.median(results[q]["differential"])))
    return sorted(rows, key=lambda r: (r[0], r[1]))


def _rate_sweep(bench: Bench, paths: dict, args, queries: list):
    """FULL vs forced DIFFERENTIAL as the fraction of lineitem changed at once grows."""
    rows = []
    total = lineitem_rows(paths)
    for i, rate in enumerate(float(x) for x in args.rates.split(",") if x.strip()):
        done = change_fraction(paths, rate, salt=i + 1)
        for q in queries:
            full = bench.refresh(q, "full")
            diff = bench.refresh(q, "differential")
            if not bench.same(q):
                print(f"  !! {q}: differential differs from full at change rate {rate}", file=sys.stderr)
                return None
            if diff.rows_changed == 0:
                print(
                    f"  !! {q}: the change at rate {rate} touched no row of the result; not a measurement",
                    file=sys.stderr,
                )
                return None
            rows.append((q, rate, full.seconds, diff.seconds))
            print(
                f"  rate sweep {q} {rate:.2%} of {total} lineitem rows: full {full.seconds:.2f}s, "
                f"differential {diff.seconds:.2f}s ({diff.rows_changed} rows changed; {_phases(diff.phases)}; "
                f"{done['seconds']:.0f}s to change)",
                flush=True,
            )
    return rows


def _report(args, paths, queries, results, peaks, scale_rows, rate_rows) -> str:
    lines = [
        f"TPC-H SF {args.sf:g} ({lineitem_rows(paths)} lineitem rows), {args.changes} changed rows per "
        f"cycle, {args.cycles} cycles; medians. Machine: {machine()}.",
        "",
        "| query | initial build (s) | FULL (s) | DIFFERENTIAL (s) | FULL / DIFF | no-change refresh (s) | "
        "rows changed | delta reads / rebuild reads | modes | `auto` picks |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for q in queries:
        r = results[q]
        full, diff = statistics.median(r["full"]), statistics.median(r["differential"])
        lines.append(
            f"| {q} | {r['build']:.2f} | {full:.2f} | {diff:.2f} | {full / diff:.1f}x | {r['noop']:.3f} | "
            f"{statistics.median(r['rows']):.0f} | {_ratio(_median_of(r['read_ratio']))} | "
            f"{', '.join(sorted(set(r['modes'])))} | {', '.join(sorted(set(r.get('auto', []))))} |"
        )
    lines += [
        "",
        "Where a differential refresh spends its time (median ms per phase):",
        "",
        "| query | " + " | ".join(_PHASES) + " |",
        "|---|" + "---|" * len(_PHASES),
    ]
    for q in queries:
        ph = results[q]["phases"]
        lines.append(
            f"| {q} | "
            + " | ".join(f"{statistics.median([p.get(k, 0) for p in ph]) * 1000:.0f}" for k in _PHASES)
            + " |"
        )
    lines += [
        "",
        "Peak driver memory (resident MiB, Python process / Spark JVM) during the refreshes: "
        + "; ".join(
            f"{mode}: " + " / ".join(f"{v:.0f}" for v in peaks[mode].values())
            for mode in ("full", "differential")
            if peaks[mode]
        ),
    ]
    if scale_rows:
        lines += [
            "",
            f"Scale sweep: DIFFERENTIAL refresh (s, median) with {args.changes} changed rows per cycle:",
            "",
            "| query | " + " | ".join(f"SF {sf:g}" for sf in sorted({r[1] for r in scale_rows})) + " |",
            "|---|" + "---|" * len({r[1] for r in scale_rows}),
        ]
        for q in sorted({r[0] for r in scale_rows}):
            lines.append(f"| {q} | " + " | ".join(f"{t:.2f}" for (qq, _, t) in scale_rows if qq == q) + " |")
    if rate_rows:
        lines += [
            "",
            "Change-rate sweep: a fraction of lineitem changed at once; FULL vs forced DIFFERENTIAL (s):",
            "",
            "| query | changed | FULL (s) | DIFFERENTIAL (s) | FULL / DIFF |",
            "|---|---|---|---|---|",
        ]
        for q, rate, full, diff in rate_rows:
            lines.append(f"| {q} | {rate:.2%} | {full:.2f} | {diff:.2f} | {full / diff:.2f}x |")
    return "\n".join(lines)


def _median_of(values: list):
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


_PHASES = ("plan", "changes", "analyze", "delta", "merge", "publish")


def chart(results: dict, queries: list, scale_rows: list, rate_rows: list, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 1 + bool(scale_rows) + bool(rate_rows)
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.2), squeeze=False)
    ax = axes[0][0]
    full = [statistics.median(results[q]["full"]) for q in queries]
    diff = [statistics.median(results[q]["differential"]) for q in queries]
    x = range(len(queries))
    ax.bar([i - 0.2 for i in x], full, width=0.4, label="FULL refresh")
    ax.bar([i + 0.2 for i in x], diff, width=0.4, label="DIFFERENTIAL refresh")
    for i, (f, d) in enumerate(zip(full, diff)):
        ax.text(i, max(f, d) * 1.02, f"{f / d:.1f}x", ha="center")
    ax.set_xticks(list(x))
    ax.set_xticklabels(queries)
    ax.set_ylabel("seconds (median)")
    ax.set_title(title)
    ax.legend()
    k = 1
    if scale_rows:
        ax = axes[0][k]
        k += 1
        for q in sorted({r[0] for r in scale_rows}):
            pts = [(sf, t) for (qq, sf, t) in scale_rows if qq == q]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{q} DIFFERENTIAL")
        ax.set_xlabel("scale factor")
        ax.set_ylabel("seconds (median)")
        ax.set_ylim(bottom=0)
        ax.set_title("Differential refresh vs table size (same change)")
        ax.legend()
    if rate_rows:
        ax = axes[0][k]
        for q in sorted({r[0] for r in rate_rows}):
            by_rate = [(rate, f, d) for (qq, rate, f, d) in rate_rows if qq == q]
            line = ax.plot(
                [p[0] * 100 for p in by_rate], [p[2] for p in by_rate], marker="o", label=f"{q} DIFFERENTIAL"
            )
            ax.plot(
                [p[0] * 100 for p in by_rate],
                [p[1] for p in by_rate],
                marker="s",
                linestyle="--",
                color=line[0].get_color(),
                label=f"{q} FULL",
            )
        ax.set_xscale("log")
        ax.set_xlabel("% of lineitem changed at once")
        ax.set_ylabel("seconds")
        ax.set_title("Where FULL becomes cheaper")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
