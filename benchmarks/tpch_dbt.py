"""TPC-H stream tables measured the way users meet them: `dbt run` in a fresh process.

A generated dbt project holds every query twice over the same Delta sources: `<q>` (a stream
table, refresh_mode='auto') and `<q>_full` (refresh_mode='full': each run recomputes, as
`dbt run --full-refresh` does). A cycle changes the sources, runs `dbt run --select tag:diff`
and `dbt run --select tag:full --full-refresh` on the same source versions (which first
alternates by cycle: benchmarks/run_tpch_dbt.py), takes each
model's time from dbt's own run_results.json (execution_time, less the time the stream table
spent reading the Spark metrics the benchmark turns on, `meter_ms`, which a user's run does not
spend) and the run's wall time, and checks that both sets hold the same rows. Peak memory is
sampled from /proc for the dbt
process and everything it starts (the local Spark JVM).

Two ways to reach Spark: `session` (dbt-spark's method: session, a fresh local JVM in every
`dbt run`) and `connect` (a long-lived Spark Connect server, profile `method: connect`;
python_helpers/testing/local_spark.py starts one).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from python_helpers.runtime.connections.trace import TRACE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WARMUP = "warmup"  # DbtBench.warmup's model
# Its SQL: a scan, a join, an aggregate and a write, the work a fresh JVM warms up on, over
# orders and customer (lineitem's files, read without Delta's log, hold every rewritten file).
WARMUP_SQL = """
SELECT c.c_mktsegment, o.o_orderpriority, COUNT(*) AS order_count, SUM(o.o_totalprice) AS total_price
FROM {orders} o
JOIN {customer} c ON o.o_custkey = c.c_custkey
GROUP BY c.c_mktsegment, o.o_orderpriority
"""
SLOWEST = 5  # the slowest calls to Spark kept per model and run (connections/trace.py)


def linked_copy(src: str, dst: str) -> None:
    """A copy of the pristine Delta tables whose data files are hard links (they are never
    modified; new commits and files go to the copy only)."""
    if os.path.exists(dst):
        shutil.rmtree(dst)
    subprocess.run(["cp", "-al", src, dst], check=True)


def engine_spark_conf(engine: str) -> dict | None:
    """The Spark settings a profile's `engine` needs: Delta Lake's for `spark` ({} otherwise);
    None, with the reason printed, when its jars are missing."""
    if engine != "spark":
        return {}
    from python_helpers.testing import delta_lake

    missing = delta_lake.missing()
    if missing:
        print(missing, file=sys.stderr)
        return None
    return delta_lake.spark_conf()


def _source_sql(sql: str) -> str:
    return re.sub(r"\{src\}\.(\w+)", lambda m: "{{ source('tpch', '" + m.group(1) + "') }}", sql)


@dataclass
class ModelRun:
    seconds: float  # dbt's execution_time, less the metering's own time (see RunReport)
    mode: str
    rows_changed: int
    reason: str
    phases: dict
    counters: dict
    statements: int = 0  # calls to Spark the refresh made (connections/trace.py)
    slowest: list = field(default_factory=list)  # the slowest of them: (seconds, method, text)


@dataclass
class RunReport:
    wall: float
    models: dict  # name -> ModelRun
    peak_rss_mib: float  # dbt and every process it started (a local session's JVM)
    ok: bool
    message: str = ""
    peak_dbt_mib: float = 0.0  # the dbt process alone: where change batches read by delta-rs land


@dataclass
class DbtBench:
    work: str
    paths: dict  # relation -> Delta path
    queries: dict  # name -> SQL over {src}.table
    spark_mode: str = "session"  # session | connect
    remote: str = ""  # sc://host:port for connect
    ui_url: str = ""  # the Spark UI whose REST API gives jobs and bytes (connect: the server's)
    threads: int = 1
    driver_memory: str = "10g"  # a local session's JVM heap (FULL of SF10's joins wants several GiB)
    env: dict = field(default_factory=dict)
    engine: str = ""  # the profile's `engine` (empty: the default, auto)
    spark_conf: dict = field(default_factory=dict)  # more settings of a local session (Delta Lake's)
    # Also write `<q>_table`: the same query as a plain dbt `table` model (what a user would
    # pick instead), in this file format; "" writes none and keeps the `<q>_full` twins.
    table_format: str = ""
    # More config of a stream table model, by name (e.g. "unique_key=['id']"), as dbt config text.
    stream_config: dict = field(default_factory=dict)
    # A `table` model that every run builds first (every other model depends on it), not
    # reported: a fresh JVM's first heavy queries pay its warm-up (JIT, code generation, the
    # writer: seconds), which would otherwise land on whichever model first has work to do, a
    # different one in a differential run than in a full one. Its SQL names a source's data
    # files as `{orders}` (read as parquet, whatever Delta's log says: the first build has no
    # catalog entries for the sources yet). "" writes none.
    warmup: str = ""

    @property
    def project(self) -> str:
        return os.path.join(self.work, "project")

    def write(self) -> None:
        models = os.path.join(self.project, "models")
        os.makedirs(models, exist_ok=True)
        with open(os.path.join(self.project, "dbt_project.yml"), "w") as handle:
            handle.write(
                "name: tpch_bench\nversion: '1.0'\nconfig-version: 2\nprofile: tpch_bench\nmodel-paths: ['models']\n"
            )
        tables = sorted({r.split(".")[1] for r in self.paths})
        with open(os.path.join(models, "sources.yml"), "w") as handle:
            handle.write("version: 2\nsources:\n  - name: tpch\n    schema: tpch\n    tables:\n")
            for t in tables:
                handle.write(f"      - name: {t}\n        meta: {{delta_path: '{self.paths['tpch.' + t]}'}}\n")
        after = ""
        if self.warmup:
            with open(os.path.join(models, f"{WARMUP}.sql"), "w") as handle:
                handle.write(
                    f"{{{{ config(materialized='table', file_format='{self.table_format or 'parquet'}', "
                    f"tags=['{WARMUP}']) }}}}\n"
                    + self.warmup.format(**{t: f"parquet.`{self.paths['tpch.' + t]}`" for t in tables})
                )
            after = f"-- depends_on: {{{{ ref('{WARMUP}') }}}}\n"
        for name, sql in self.queries.items():
            body = after + _source_sql(sql)
            with open(os.path.join(models, f"{name}.sql"), "w") as handle:
                extra = f", {self.stream_config[name]}" if name in self.stream_config else ""
                handle.write(
                    f"{{{{ config(materialized='stream_table', refresh_mode='auto', tags=['diff']{extra}) }}}}\n" + body
                )
            if self.table_format:
                with open(os.path.join(models, f"{name}_table.sql"), "w") as handle:
                    handle.write(
                        f"{{{{ config(materialized='table', file_format='{self.table_format}', tags=['table']) }}}}\n"
                        + body
                    )
                continue
            with open(os.path.join(models, f"{name}_full.sql"), "w") as handle:
                handle.write("{{ config(materialized='stream_table', refresh_mode='full', tags=['full']) }}\n" + body)
        warehouse = os.path.join(self.work, "warehouse")
        metastore = os.path.join(self.work, "metastore_db")
        params = {
            "spark.sql.warehouse.dir": warehouse,
            "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={metastore};create=true",
            "spark.driver.extraJavaOptions": f"-Dderby.system.home={self.work}",
            "spark.driver.memory": self.driver_memory,
            "spark.sql.shuffle.partitions": "4",
            "spark.ui.enabled": "true",  # the metrics read Spark's REST API
            "spark.ui.port": "0",
            "spark.ui.showConsoleProgress": "false",
            "spark.log.level": "ERROR",
            "spark.sql.session.timeZone": "UTC",
            **self.spark_conf,
        }
        method, host = ("connect", self.remote) if self.spark_mode == "connect" else ("session", "localhost")
        lines = [
            "tpch_bench:",
            "  target: bench",
            "  outputs:",
            "    bench:",
            "      type: spark_stream",
            f"      method: {method}",
            f'      host: "{host}"',
            "      schema: bench",
            f"      threads: {self.threads}",
        ]
        if self.engine:
            lines.append(f"      engine: {self.engine}")
        if self.spark_mode == "session":
            lines.append("      server_side_parameters:")
            lines += [f'        {k}: "{v}"' for k, v in params.items()]
        with open(os.path.join(self.project, "profiles.yml"), "w") as handle:
            handle.write("\n".join(lines) + "\n")

    def _environment(self) -> dict:
        env = {**os.environ, **self.env, "DBT_SPARK_STREAM_METRICS": "1", "PYSPARK_PYTHON": sys.executable}
        env.pop("SPARK_REMOTE", None)
        if self.spark_mode == "connect" and self.ui_url:
            env["DBT_SPARK_STREAM_SPARK_UI"] = self.ui_url
        return env

    def dbt(self, *args: str) -> RunReport:
        dbt = os.path.join(os.path.dirname(sys.executable), "dbt")
        if self.warmup and "--select" in args:  # the warm-up model runs first in every run
            at = args.index("--select") + 2
            args = (*args[:at], f"tag:{WARMUP}", *args[at:])
        cmd = [dbt, *args, "--project-dir", self.project, "--profiles-dir", self.project]
        results = os.path.join(self.project, "target", "run_results.json")
        if os.path.exists(results):
            os.remove(results)
        trace = os.path.join(self.work, "traces", f"{time.time_ns()}.jsonl")
        os.makedirs(os.path.dirname(trace), exist_ok=True)
        started = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**self._environment(), TRACE: trace},
            cwd=self.project,
        )
        sampler = _PeakRss(proc.pid)
        sampler.start()
        out, _ = proc.communicate()
        wall = time.perf_counter() - started
        peak = sampler.stop()
        own = sampler.own_peak
        models = {}
        ok = proc.returncode == 0
        calls = _trace_by_model(trace)
        if os.path.exists(results):
            with open(results) as handle:
                data = json.load(handle)
            shutil.copyfile(results, trace[: -len(".jsonl")] + ".run_results.json")  # kept beside its trace
            for r in data["results"]:
                name = r["unique_id"].split(".")[-1]
                resp = r.get("adapter_response") or {}
                # The Spark metrics the benchmark turns on (DBT_SPARK_STREAM_METRICS) cost a
                # stream table's run the REST calls that read them (about a second for the first
                # in a fresh process); a user's run and the `table` models make none.
                metering = ((resp.get("counters") or {}).get("meter_ms") or 0) / 1000
                models[name] = ModelRun(
                    r.get("execution_time", 0.0) - metering,
                    resp.get("mode", "?"),
                    resp.get("rows_changed", 0) or 0,
                    resp.get("reason") or "",
                    resp.get("phases") or {},
                    resp.get("counters") or {},
                    len(calls.get(name, [])),
                    sorted(calls.get(name, []), reverse=True)[:SLOWEST],
                )
                ok = ok and r["status"] == "success"
        return RunReport(wall, models, peak, ok, "" if ok else out[-3000:], own)


def _trace_by_model(path: str) -> dict:
    """The trace's calls by model name (the last part of dbt's unique id): (seconds, method, text)."""
    calls: dict = {}
    if not os.path.exists(path):
        return calls
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            call = json.loads(line)
            name = str(call["model"]).split(".")[-1]
            calls.setdefault(name, []).append((call["seconds"], call["method"], call["text"]))
    return calls


class _PeakRss(threading.Thread):
    """Peak resident memory (MiB) of a process and its descendants, sampled every 0.2 s (the
    process itself: its kernel high-water mark, exact)."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.own_peak, self._done = pid, 0.0, 0.0, threading.Event()

    def _tree(self) -> list:
        pids, frontier = [self.pid], [self.pid]
        while frontier:
            parent = frontier.pop()
            try:
                with open(f"/proc/{parent}/task/{parent}/children") as handle:
                    kids = [int(x) for x in handle.read().split()]
            except OSError:
                kids = []
            pids += kids
            frontier += kids
        return pids

    def run(self) -> None:
        while not self._done.is_set():
            total = 0.0
            for pid in self._tree():
                rss = _rss_mib(pid)
                total += rss
                if pid == self.pid:
                    # The kernel's high-water mark: a peak between two samples counts too.
                    self.own_peak = max(self.own_peak, rss, _rss_mib(pid, "VmHWM"))
            self.peak = max(self.peak, total)
            time.sleep(0.2)

    def stop(self) -> float:
        self._done.set()
        self.join(2)
        return self.peak


def _rss_mib(pid: int, field: str = "VmRSS") -> float:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


CHECK = r"""
import json, os, sys
from collections import Counter
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
names, work, remote, conf = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
if remote:
    spark = SparkSession.builder.remote(remote).getOrCreate()
else:
    builder = SparkSession.builder
    for key, value in conf.items():  # Delta Lake's, on the spark engine
        builder = builder.config(key, value)
    spark = (builder.master("local[2]").enableHiveSupport()
             .config("spark.sql.warehouse.dir", os.path.join(work, "warehouse"))
             .config("spark.hadoop.javax.jdo.option.ConnectionURL",
                     "jdbc:derby:;databaseName=" + os.path.join(work, "metastore_db") + ";create=true")
             .config("spark.driver.extraJavaOptions", "-Dderby.system.home=" + work)
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC").getOrCreate())
def norm(v):
    return round(v, 6) if isinstance(v, float) else str(v)
out = {}
for n in names:
    a = Counter(tuple(norm(v) for v in r) for r in spark.table(f"bench.{n}").collect())
    b = Counter(tuple(norm(v) for v in r) for r in spark.table(f"bench.{n}_full").collect())
    out[n] = a == b
print("CHECK " + json.dumps(out))
"""


def check_equal(bench: DbtBench, names: list) -> dict:
    """Each stream table against its full twin, after both refreshed to the same versions."""
    env = bench._environment()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            CHECK,
            json.dumps(names),
            bench.work,
            bench.remote if bench.spark_mode == "connect" else "",
            json.dumps(bench.spark_conf),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("CHECK ")), None)
    if line is None:
        raise RuntimeError(f"check failed: {proc.stderr[-3000:]}")
    return json.loads(line[len("CHECK ") :])
