"""The models users have beside TPC-H's aggregates, through `dbt run`, against a plain dbt
`table` model of the same query: what a user would pick instead.

    .venv/bin/python benchmarks/run_models_dbt.py                      # SF 1, embedded engine
    .venv/bin/python benchmarks/run_models_dbt.py --engine spark       # Delta Lake in Spark (make jars)
    .venv/bin/python benchmarks/run_models_dbt.py --sf 10 --cycles 1
    .venv/bin/python benchmarks/run_models_dbt.py --models fact,rollup,tpch --cycles 1 --mixes rf

Two models over TPC-H's Delta tables (and with `--models`, any of TPC-H's 22 queries as well):
* `fact`: a denormalized fact, one row per lineitem (lineitem ⋈ orders ⋈ customer, 12 columns),
  declared unique by lineitem's key (`unique_key`; `--no-unique-key` stores it as a bag);
* `rollup`: one row per customer with its orders' count, total and last date.

Each is written twice: `<m>` (materialized='stream_table', refresh_mode='auto') and
`<m>_table` (materialized='table', the file format the engine's users have: parquet without
Delta Lake in Spark, delta with it). Every `dbt run` is a fresh process with a fresh local Spark
(dbt-spark's `method: session`); times are dbt's own `execution_time` per model (a stream
table's less the metering's own REST calls, `meter_ms`: benchmarks/tpch_dbt.py).

First the stream tables are built and the table models run once (first build against table).
Then per cycle and change mix (1,000 scattered lineitem updates with their orders; TPC-H's
refresh functions): change the sources, `dbt run -s tag:diff` (DIFFERENTIAL), `dbt run -s
tag:table` (the table model on the same source versions), check that each stream table holds
exactly the table model's rows (Spark's EXCEPT ALL both ways), then `dbt run -s tag:diff
--full-refresh` (FULL). Peak resident memory of the dbt process alone is its kernel high-water
mark (/proc VmHWM).

Every run first builds a small `table` model, `warmup` (a join and aggregate over orders and
customer, not reported; `--no-warmup` leaves it out): a fresh JVM's first heavy queries pay
seconds of warm-up (q04's `table` model took 9.0-9.8 s as the first heavy model of its runs,
3.9-5.2 s after the warm-up; 2026-12-02), which would otherwise land on whichever model first
has work in that run, and that is a different model in a differential run (where models with
nothing to do come first) than in a full one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.run_tpch_dbt import _phase_table  # noqa: E402
from benchmarks.tpch_dbt import WARMUP, WARMUP_SQL, DbtBench, RunReport, engine_spark_conf, linked_copy  # noqa: E402
from python_helpers.testing.tpch_data import RefreshFunctions, ScatteredUpdates, build  # noqa: E402

MODELS = {
    "fact": """
SELECT l.l_orderkey, l.l_linenumber, l.l_partkey, l.l_suppkey, l.l_quantity, l.l_extendedprice,
       l.l_discount, l.l_shipdate, o.o_orderdate, o.o_orderpriority, c.c_custkey, c.c_mktsegment
FROM {src}.lineitem l
JOIN {src}.orders o ON l.l_orderkey = o.o_orderkey
JOIN {src}.customer c ON o.o_custkey = c.c_custkey
""",
    "rollup": """
SELECT c.c_custkey, c.c_name, COUNT(*) AS order_count, SUM(o.o_totalprice) AS total_price,
       MAX(o.o_orderdate) AS last_order
FROM {src}.customer c
JOIN {src}.orders o ON o.o_custkey = c.c_custkey
GROUP BY c.c_custkey, c.c_name
""",
}

# The fact's rows are unique by lineitem's key: declared as dbt's `unique_key`, the stream table
# stores one row per key (no grouping by every column; docs/dbt-usage.md). --no-unique-key
# leaves it out (a bag: one stored row per distinct tuple and its count).
UNIQUE_KEYS = {"fact": "unique_key=['l_orderkey', 'l_linenumber']"}

CHECK = r"""
import json, os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
names, work, conf = json.loads(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
builder = (SparkSession.builder.master("local[2]").enableHiveSupport()
           .config("spark.sql.warehouse.dir", os.path.join(work, "warehouse"))
           .config("spark.hadoop.javax.jdo.option.ConnectionURL",
                   "jdbc:derby:;databaseName=" + os.path.join(work, "metastore_db") + ";create=true")
           .config("spark.driver.extraJavaOptions", "-Dderby.system.home=" + work)
           .config("spark.driver.memory", "6g").config("spark.sql.shuffle.partitions", "8")
           .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC"))
for k, v in conf.items():
    builder = builder.config(k, v)
spark = builder.getOrCreate()
out = {}
for n in names:
    a, b = f"bench.{n}", f"bench.{n}_table"
    only_a = spark.sql(f"SELECT count(*) FROM (SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b})").collect()[0][0]
    only_b = spark.sql(f"SELECT count(*) FROM (SELECT * FROM {b} EXCEPT ALL SELECT * FROM {a})").collect()[0][0]
    rows = spark.table(a).count()
    out[n] = {"rows": rows, "only_stream": only_a, "only_table": only_b}
print("CHECK " + json.dumps(out))
"""


def _models(selection: str) -> dict:
    """The models by name: fact, rollup, TPC-H's q01..q22, or `tpch` for all 22 of them."""
    from python_helpers.testing.tpch_queries import QUERIES

    known = {**MODELS, **QUERIES}
    names: list = []
    for name in (n.strip() for n in selection.split(",") if n.strip()):
        names += list(QUERIES) if name == "tpch" else [name]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown models {unknown}: fact, rollup, q01..q22 or tpch")
    return {n: known[n] for n in names}


def _check(bench: DbtBench, names: list) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHECK, json.dumps(names), bench.work, json.dumps(bench.spark_conf)],
        capture_output=True,
        text=True,
        env=bench._environment(),
        timeout=3600,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("CHECK ")), None)
    if line is None:
        raise RuntimeError(f"check failed: {proc.stderr[-3000:]}")
    return json.loads(line[len("CHECK ") :])


def _ok(report: RunReport, what: str) -> RunReport:
    if not report.ok:
        raise RuntimeError(f"{what} failed:\n{report.message}")
    return report


def machine() -> str:
    return f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}"


def run(args) -> int:
    work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="dvm-models-bench-"))
    os.makedirs(work, exist_ok=True)
    data_root = os.path.join(args.data or os.path.join(ROOT, ".work", "tpch"), f"sf{args.sf:g}")
    pristine = build(args.sf, data_root, log=lambda t: print(t, flush=True))
    lake = os.path.join(work, "lake")
    linked_copy(os.path.join(data_root, "tpch.db"), lake)
    paths = {r: os.path.join(lake, r.split(".")[1]) for r in pristine}
    spark_conf = engine_spark_conf(args.engine)  # Delta Lake's, loaded into the session or the server
    if spark_conf is None:
        return 1
    models = _models(args.models)
    bench = DbtBench(
        work,
        paths,
        models,
        driver_memory=args.driver_memory,
        engine=args.engine,
        spark_conf=spark_conf,
        table_format="delta" if args.engine == "spark" else "parquet",
        stream_config={} if args.no_unique_key else {m: c for m, c in UNIQUE_KEYS.items() if m in models},
        warmup="" if args.no_warmup else WARMUP_SQL,
    )
    bench.write()
    try:
        built = _ok(bench.dbt("run", "--select", "tag:diff"), "the first build")
        tabled = _ok(bench.dbt("run", "--select", "tag:table"), "the table models")
        firsts = [
            f"{m} {built.models[m].seconds:.1f}s (table {tabled.models[f'{m}_table'].seconds:.1f}s)" for m in models
        ]
        print(f"first build: {', '.join(firsts)}; dbt process peak {built.peak_dbt_mib:.0f} MiB", flush=True)
        orders = max(1, int(1_500_000 * args.sf * 0.001))
        mixes: dict[str, ScatteredUpdates | RefreshFunctions] = {
            "scattered": ScatteredUpdates(paths, rows=1000),
            "rf": RefreshFunctions(paths, orders),
        }
        chosen = [m for m in args.mixes.split(",") if m]
        records: dict = {m: [] for m in chosen}
        for cycle in range(1, args.cycles + 1):
            for mix in chosen:
                mixes[mix].apply()
                diff = _ok(bench.dbt("run", "--select", "tag:diff"), "the differential run")
                table = _ok(bench.dbt("run", "--select", "tag:table"), "the table run")
                checked = _check(bench, list(models))
                full = _ok(bench.dbt("run", "--select", "tag:diff", "--full-refresh"), "the full run")
                records[mix].append((diff, table, full, checked))
                print(
                    f"cycle {cycle} {mixes[mix].name}{_warmups((diff, table, full))}: "
                    + "; ".join(
                        f"{m}: {diff.models[m].mode} {diff.models[m].seconds:.1f}s, table "
                        f"{table.models[m + '_table'].seconds:.1f}s, full {full.models[m].seconds:.1f}s, "
                        f"{checked[m]['rows']} rows, differing {checked[m]['only_stream'] + checked[m]['only_table']}"
                        for m in models
                    ),
                    flush=True,
                )
                bad = {m: c for m, c in checked.items() if c["only_stream"] or c["only_table"]}
                if bad:
                    print(f"!! a stream table differs from its table model: {bad}", file=sys.stderr)
                    return 1
        report = _report(args, models, built, tabled, records, mixes)
        suffix = "_bag" if args.no_unique_key and "fact" in models else ""
        suffix += "" if set(models) <= set(MODELS) else f"_{len(models)}_models"
        stem = os.path.join(args.out, f"models_dbt_{args.engine}_sf{args.sf:g}{suffix}")
        os.makedirs(args.out, exist_ok=True)
        with open(stem + ".md", "w") as handle:
            handle.write(report + "\n")
        _chart(models, records, mixes, stem + ".png", f"TPC-H SF {args.sf:g} models through dbt ({args.engine} engine)")
        print("\n" + report + f"\nwrote {stem}.md and {stem}.png", flush=True)
        return 0
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


def _median(values) -> float:
    return statistics.median(values)


def _report(args, models, built, tabled, records, mixes) -> str:
    lines = [
        f"TPC-H SF {args.sf:g}, engine `{args.engine}`, through `dbt run` (a fresh process and local Spark per "
        f"run, {args.driver_memory} heap), {args.cycles} cycle(s), medians; machine: {machine()}"
        + ("; the fact as a bag (no unique_key)." if args.no_unique_key else "; the fact with its `unique_key`."),
        "",
        "DIFF / FULL per cycle: each cycle's refresh in the DIFFERENTIAL run (`refresh_mode='auto'`) over "
        "the same cycle's `--full-refresh`; `f` marks one `auto` ran in full.",
        "",
        *_warmup_lines(args, built, tabled, records),
        "| model | rows | table model, first run (s) | stream table, first build (s) | build / table | "
        "dbt process peak, build (MiB) |",
        "|---|---|---|---|---|---|",
    ]
    any_rows = next(iter(records.values()))
    for m in models:
        rows = any_rows[-1][3][m]["rows"] if any_rows else 0
        b, t = built.models[m].seconds, tabled.models[m + "_table"].seconds
        lines.append(f"| {m} | {rows:,} | {t:.1f} | {b:.1f} | {b / t:.2f}x | {built.peak_dbt_mib:.0f} |")
    for mix, rows in records.items():
        lines += [
            "",
            f"**{mixes[mix].name}**",
            "",
            "| model | table model (s) | FULL (s) | FULL / table | DIFFERENTIAL (s) | mode | table / DIFF "
            "| FULL / DIFF | DIFF / FULL per cycle | dbt process peak, DIFF (MiB) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for m in models:
            d = _median([r[0].models[m].seconds for r in rows])
            t = _median([r[1].models[m + "_table"].seconds for r in rows])
            f = _median([r[2].models[m].seconds for r in rows])
            modes = ", ".join(sorted({r[0].models[m].mode for r in rows}))
            peak = max(r[0].peak_dbt_mib for r in rows)
            # Each cycle's refresh against the same cycle's FULL: whether `auto` stays within
            # 1.1x of a rebuild once it has a history.
            per_cycle = " ".join(
                f"{r[0].models[m].seconds / r[2].models[m].seconds:.2f}{'f' if r[0].models[m].mode == 'full' else ''}"
                for r in rows
            )
            lines.append(
                f"| {m} | {t:.1f} | {f:.1f} | {f / t:.2f}x | {d:.1f} | {modes} | {t / d:.1f}x | {f / d:.1f}x "
                f"| {per_cycle} | {peak:.0f} |"
            )
        lines += _phase_table(models, rows)
        lines += _statements(models, rows)
    return "\n".join(lines)


def _warmups(reports) -> str:
    """The warm-up model's time in each run, when it ran: ' (warm-up 3.1/2.9/3.0 s)'."""
    seconds = [r.models[WARMUP].seconds for r in reports if WARMUP in r.models]
    return f" (warm-up {'/'.join(f'{s:.1f}' for s in seconds)} s)" if seconds else ""


def _warmup_lines(args, built, tabled, records) -> list:
    if args.no_warmup:
        return ["No warm-up model: the first model with work in each run pays the JVM's warm-up.", ""]
    runs = [built, tabled] + [r for rows in records.values() for x in rows for r in x[:3]]
    seconds = [r.models[WARMUP].seconds for r in runs if WARMUP in r.models]
    return [
        f"Every run built a warm-up `table` model first (a join and aggregate of orders and customer, not "
        f"reported): a fresh JVM's first heavy queries pay seconds of warm-up, which would otherwise land on "
        f"whichever model first has work, a different one in a differential run than in a full one. It took "
        f"{min(seconds):.1f}-{max(seconds):.1f} s per run. It also favours the `table` models, measured in "
        f"fresh JVMs (README: q10's statement 3.44 s against the stream table's INSERT 4.42 s after it, "
        f"3.88 s against 4.32 s after a warm-up over generated rows, 5.75 s against 5.4 s with none)."
        if seconds
        else "",
        "",
        "Each cycle's DIFFERENTIAL run is the first after the change: its publish phase includes moving the "
        "source views that the `table` and FULL runs then find moved.",
        "",
    ]


def _statements(models, rows) -> list:
    """The last cycle's DIFFERENTIAL refresh: how many calls to Spark, and the slowest."""
    diff = rows[-1][0]
    if not any(diff.models[m].statements for m in models):
        return []
    lines = [
        "",
        "Calls to Spark in the last DIFFERENTIAL refresh (`DBT_SPARK_STREAM_TRACE`) and the slowest of them:",
        "",
        "| model | calls | slowest (s, method, statement) |",
        "|---|---|---|",
    ]
    for m in models:
        run = diff.models[m]
        slowest = "<br>".join(
            f"{sec:.2f} {method} `{(text[:90] or '-').replace('|', '/').replace('`', '')}`"
            for sec, method, text in run.slowest
        )
        lines.append(f"| {m} | {run.statements} | {slowest} |")
    return lines


def _chart(models, records, mixes, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [m for m in records if records[m]]
    width = max(6, len(models) * 0.6)
    fig, axes = plt.subplots(len(shown), 1, figsize=(width, 4 * len(shown)), squeeze=False)
    for ax, mix in zip(axes[:, 0], shown):
        rows = records[mix]
        names = list(models)
        series = {
            "table model (dbt run)": [_median([r[1].models[m + "_table"].seconds for r in rows]) for m in names],
            "stream table FULL (--full-refresh)": [_median([r[2].models[m].seconds for r in rows]) for m in names],
            "stream table DIFFERENTIAL (dbt run)": [_median([r[0].models[m].seconds for r in rows]) for m in names],
        }
        for i, (label, values) in enumerate(series.items()):
            ax.bar([x + (i - 1) * 0.27 for x in range(len(names))], values, width=0.27, label=label)
        ax.set_xticks(list(range(len(names))))
        ax.set_xticklabels(names, rotation=45 if len(names) > 6 else 0)
        ax.set_ylabel("seconds (dbt execution_time)")
        ax.set_title(mixes[mix].name)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (default 1)")
    parser.add_argument("--engine", choices=("embedded", "spark"), default="embedded")
    parser.add_argument(
        "--models", default="fact,rollup", help="comma-separated: fact, rollup, q01..q22, or tpch (all 22)"
    )
    parser.add_argument("--mixes", default="scattered,rf", help="change mixes: scattered, rf")
    parser.add_argument("--cycles", type=int, default=2, help="change cycles (default 2)")
    parser.add_argument("--driver-memory", default="8g", help="the local Spark's heap (default 8g)")
    parser.add_argument("--data", default=None, help="where generated TPC-H is cached (.work/tpch)")
    parser.add_argument("--work", default=None, help="work directory (default: a temp dir, removed after)")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="no warm-up model first in each run: the first model with work pays the JVM's warm-up",
    )
    parser.add_argument(
        "--no-unique-key", action="store_true", help="build the fact without unique_key (a bag with counts)"
    )
    args = parser.parse_args(argv)
    print(f"machine: {machine()}", flush=True)
    started = time.perf_counter()
    code = run(args)
    print(f"done in {time.perf_counter() - started:.0f}s", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
