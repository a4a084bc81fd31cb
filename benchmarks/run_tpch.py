"""FULL vs DIFFERENTIAL refresh on TPC-H, in one warm Spark session, on the same data.

    .venv/bin/python benchmarks/run_tpch.py --sf 1 --changes 1000 --cycles 3

For every query two stream tables are built over the same sources: one with
refresh_mode='full', one differential. Each cycle applies one change batch to lineitem and
orders (70% updates, 15% deletes, 15% inserts of changed rows), then refreshes both (the same
source versions), checks that they hold the same rows, and times each refresh (the refresh
only: Spark start, data generation and source changes are not timed). Prints a table of
medians and writes benchmarks/results/tpch_sf<sf>.{md,png}.
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.tpch_data import ChangeBatches, generate, lineitem_rows, load  # noqa: E402
from benchmarks.tpch_queries import QUERIES  # noqa: E402


def spark_session(work: str):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[*]").appName("dbt-spark-stream-bench").enableHiveSupport()
             .config("spark.sql.warehouse.dir", os.path.join(work, "warehouse"))
             .config("spark.hadoop.javax.jdo.option.ConnectionURL",
                     f"jdbc:derby:;databaseName={os.path.join(work, 'metastore_db')};create=true")
             .config("spark.driver.memory", "8g").config("spark.sql.shuffle.partitions", "4")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def machine() -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores, {mem:.0f} GiB RAM, {platform.platform()}, Python {platform.python_version()}"


def rows_of(spark, view: str) -> Counter:
    return Counter(tuple(str(v) for v in r) for r in spark.sql(f"select * from {view}").collect())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (default 1)")
    parser.add_argument("--changes", type=int, default=1000, help="changed rows per cycle (default 1000)")
    parser.add_argument("--cycles", type=int, default=3, help="change cycles (default 3)")
    parser.add_argument("--queries", default=",".join(QUERIES), help="comma-separated subset")
    parser.add_argument("--work", default=None, help="work directory (default: a temp dir, removed after)")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    args = parser.parse_args(argv)

    from python_helpers.runtime.api import RefreshRequest, refresh_stream_table

    work = args.work or tempfile.mkdtemp(prefix="dvm-bench-")
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    print(f"machine: {machine()}")
    t = time.perf_counter()
    data = generate(args.sf)
    print(f"dbgen sf={args.sf}: {data['lineitem'].num_rows} lineitem rows in {time.perf_counter() - t:.1f}s")
    spark = spark_session(work)
    t = time.perf_counter()
    paths = load(data, os.path.join(work, "warehouse"))
    del data
    print(f"loaded as Delta tables in {time.perf_counter() - t:.1f}s")
    spark.sql("CREATE SCHEMA IF NOT EXISTS bench")

    def refresh(name: str, mode: str):
        request = RefreshRequest(model=f"{name}_{mode}", schema="bench", identifier=f"{name}_{mode}",
                                 sql=QUERIES[name], refresh_mode=mode)
        return refresh_stream_table(spark, request, log=lambda level, text: None)

    results = {q: {"build": None, "full": [], "differential": [], "noop": None, "modes": []} for q in queries}
    for q in queries:
        first = refresh(q, "differential")
        refresh(q, "full")
        results[q]["build"] = first.seconds
        print(f"{q}: initial build {first.seconds:.2f}s ({first.rows_changed} rows)")
        noop = refresh(q, "differential")
        results[q]["noop"] = noop.seconds
    changes = ChangeBatches(paths)
    for cycle in range(1, args.cycles + 1):
        done = changes.apply(args.changes)
        print(f"cycle {cycle}: changed sources ({done})")
        for q in queries:
            full = refresh(q, "full")
            diff = refresh(q, "differential")
            same = rows_of(spark, f"bench.{q}_full") == rows_of(spark, f"bench.{q}_differential")
            results[q]["full"].append(full.seconds)
            results[q]["differential"].append(diff.seconds)
            results[q]["modes"].append(diff.mode)
            print(f"  {q}: full {full.seconds:.2f}s, {diff.mode} {diff.seconds:.2f}s "
                  f"({diff.rows_changed} rows changed), equal={same}")
            if not same:
                print(f"  !! {q}: differential result differs from the full refresh", file=sys.stderr)
                return 1
    lines = [f"TPC-H SF {args.sf} ({lineitem_rows(paths)} lineitem rows), {args.changes} changed rows per cycle, "
             f"{args.cycles} cycles; medians. Machine: {machine()}.", "",
             "| query | initial build (s) | FULL (s) | DIFFERENTIAL (s) | FULL / DIFF | no-change refresh (s) | modes |",
             "|---|---|---|---|---|---|---|"]
    for q in queries:
        r = results[q]
        full, diff = statistics.median(r["full"]), statistics.median(r["differential"])
        lines.append(f"| {q} | {r['build']:.2f} | {full:.2f} | {diff:.2f} | {full / diff:.1f}x | {r['noop']:.3f} | "
                     f"{', '.join(sorted(set(r['modes'])))} |")
    table = "\n".join(lines)
    print()
    print(table)
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"tpch_sf{args.sf:g}")
    with open(stem + ".md", "w") as handle:
        handle.write(table + "\n")
    chart(results, queries, stem + ".png", f"TPC-H SF {args.sf:g}, {args.changes} changed rows")
    print(f"\nwrote {stem}.md and {stem}.png")
    if not args.work:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def chart(results: dict, queries: list, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    full = [statistics.median(results[q]["full"]) for q in queries]
    diff = [statistics.median(results[q]["differential"]) for q in queries]
    x = range(len(queries))
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar([i - 0.2 for i in x], full, width=0.4, label="FULL refresh")
    ax.bar([i + 0.2 for i in x], diff, width=0.4, label="DIFFERENTIAL refresh")
    for i, (f, d) in enumerate(zip(full, diff)):
        ax.text(i, max(f, d) * 1.02, f"{f / d:.1f}x", ha="center")
    ax.set_xticks(list(x))
    ax.set_xticklabels(queries)
    ax.set_ylabel("seconds (median)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
