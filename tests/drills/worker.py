"""One process of a crash or concurrency drill (tests/drills/test_drills.py runs it).

    python tests/drills/worker.py WORK_DIR ACTIONS... [--remote sc://HOST:PORT] [--metastore NAME]
                                  [--warehouse DIR] [--prefix P] [--barrier DIR]
                                  [--engine auto|embedded|spark] [--models M,M]

Spark: with --remote, a Spark Connect session to a long-lived server (its warehouse and
metastore; the process is the client a scheduler would kill); otherwise a Spark session in the
process (warehouse --warehouse or WORK_DIR/warehouse, Derby metastore WORK_DIR/<NAME>), whose
JVM dies with it.
With --engine spark (Delta Lake in Spark: a server started with it, or the jars `make jars`
fetched loaded into the process's session) the stream tables are Delta tables in the catalog.
The drill's schemas are drill_<P>_src and drill_<P>_st (default P: d), so several drills can
share one server. --models refreshes only those of the drill's stream tables (totals, joined,
rows).

Actions, run in order in one process:

    setup            create the sources (Delta tables with the change feed) under WORK_DIR/lake
    change:<seed>    apply one random change batch to the sources (inserts, updates, deletes)
    refresh          refresh every drill stream table (DBT_SPARK_STREAM_KILL_AT may kill here)
    full             the same with --full-refresh
    kill:<step>      arm the kill for the next refresh (steps.KILL_AT: <step>[+<s>][@<model>])
    trace:<file>     append the steps every later refresh reaches to <file> (steps.TRACE; an
                     empty <file> stops tracing): one process traces several refreshes
    check            refresh, then compare every stream table with its recompute (the oracle),
                     and check the offsets, the catalog's views and the source views
    loop:<n>:<seed>[:<kind>]
                     n times: change, then refresh, counting refreshes that lost a race; with
                     --barrier DIR, each round starts when as many processes as DIR holds
                     `member-*` files are ready for it (they refresh at the same moment).
                     kind: `differential` (the default); `full` (--full-refresh, both
                     overwrite); `offsets` (the change is to a column no drill query reads,
                     so every refresh commits its offsets alone); `compact` (member 1 changes
                     and refreshes, member 2 rewrites every stored result with OPTIMIZE until
                     member 1's round is done)

It prints one JSON line per action result (`{"action": ..., ...}`) on stdout.
"""

from __future__ import annotations

import json
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

ENGINE = "auto"  # the Delta engine every refresh asks for (--engine)
SCHEMA = "drill_d_src"
TARGET = "drill_d_st"
QUERIES = {
    "totals": "SELECT k, COUNT(*) AS n, SUM(v) AS sv, MIN(v) AS lo, MAX(d) AS hi FROM {src}.t1 GROUP BY k",
    "joined": (
        "SELECT a.k, b.g, COUNT(*) AS n, SUM(a.v * b.v) AS s FROM {src}.t1 a JOIN {src}.t2 b "
        "ON a.k = b.k GROUP BY a.k, b.g"
    ),
    "rows": "SELECT id, k, v FROM {src}.t2 WHERE v > 0",
}
STREAMS = {name: sql.format(src=SCHEMA) for name, sql in QUERIES.items()}


def use_prefix(prefix: str, models: list | None = None) -> None:
    """Name the drill's schemas drill_<prefix>_src / drill_<prefix>_st (and refresh only
    `models` of QUERIES, in their order there)."""
    global SCHEMA, TARGET, STREAMS
    SCHEMA, TARGET = f"drill_{prefix}_src", f"drill_{prefix}_st"
    STREAMS = {name: sql.format(src=SCHEMA) for name, sql in QUERIES.items() if models is None or name in models}


def emit(**fields) -> None:
    print(json.dumps(fields), flush=True)


def session(work: str, metastore: str, remote: str | None = None, warehouse: str | None = None):
    if remote:
        from pyspark.sql import SparkSession

        return SparkSession.builder.remote(remote).getOrCreate()
    from tests.support.spark_session import build_spark_session

    base = os.path.join(work, metastore)
    os.makedirs(base, exist_ok=True)
    extra = {}
    if ENGINE == "spark":
        from python_helpers.testing import delta_lake

        extra = delta_lake.spark_conf()
    # Every process shares one warehouse (the stored results); only the metastore is its own.
    return build_spark_session(
        base, app_name=f"drill-{metastore}", warehouse=warehouse or os.path.join(work, "warehouse"), extra_conf=extra
    )


def paths(work: str) -> dict:
    return {f"{SCHEMA}.t1": os.path.join(work, "lake", "t1"), f"{SCHEMA}.t2": os.path.join(work, "lake", "t2")}


def setup(work: str) -> None:
    from tests.support import sources as S

    rng = random.Random(1)
    for path in paths(work).values():
        rows = [
            S.row(i, k=rng.randint(0, 3), g=rng.choice("abc"), v=rng.randint(-5, 5), d=rng.randint(0, 50))
            for i in range(1, 41)
        ]
        S.create_source(path, rows)


def change(work: str, seed: int) -> None:
    from tests.support import sources as S

    rng = random.Random(seed)
    by_table = {name.split(".")[1]: path for name, path in paths(work).items()}
    # One row into each source first, so every stream table has a change to apply (a kill point
    # in the second or last model must find that model at work).
    batches = [
        [S.Insert(table, [S.row(None, k=rng.randint(0, 3), g=rng.choice("abc"), v=rng.randint(1, 5), d=1)])]
        for table in sorted(by_table)
    ]
    for _ in range(3):
        table = rng.choice(sorted(by_table))
        kind = rng.choice(["insert", "update", "delete"])
        if kind == "insert":
            ops = [
                S.Insert(
                    table,
                    [
                        S.row(
                            None, k=rng.randint(0, 3), g=rng.choice("abc"), v=rng.randint(-5, 5), d=rng.randint(0, 50)
                        )
                        for _ in range(rng.randint(1, 3))
                    ],
                )
            ]
        elif kind == "update":
            ops = [S.UpdateWhere(table, "k", rng.randint(0, 3), {"v": rng.randint(-5, 5)})]
        else:
            ops = [S.DeleteRows(table, [rng.randint(0, 30)])]
        batches.append(ops)
    for ops in batches:
        for attempt in range(5):  # two drill processes may write a source at once
            try:
                S.apply_batch(by_table, ops)
                break
            except Exception:  # noqa: BLE001 - a source commit lost a race: apply again
                if attempt == 4:
                    raise


def change_unread(work: str, seed: int) -> None:
    """Update column x, which no drill query reads: each refresh's change cancels out."""
    from tests.support import sources as S

    rng = random.Random(seed)
    by_table = {name.split(".")[1]: path for name, path in paths(work).items()}
    for table in sorted(by_table):
        for attempt in range(5):
            try:
                S.apply_batch(by_table, [S.UpdateWhere(table, "k", rng.randint(0, 3), {"x": rng.random()})])
                break
            except Exception:  # noqa: BLE001 - a source commit lost a race: apply again
                if attempt == 4:
                    raise


def compact_until(spark, done: str, timeout: float = 300) -> dict:
    """Rewrite every stored result (delta-rs OPTIMIZE Z-ORDER: a commit each time, rows kept)
    over and over until the file `done` appears; counts the rewrites and the ones that lost."""
    import time

    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError, DeltaError

    from python_helpers.runtime import paths as runtime_paths
    from python_helpers.runtime.delta.locations import storage_path

    targets = [runtime_paths.for_delta_rs(storage_path(spark, TARGET, name)) for name in STREAMS]
    rng = random.Random(done)
    rewrites, lost = 0, 0
    deadline = time.monotonic() + timeout
    while not os.path.exists(done) and time.monotonic() < deadline:
        # A rewrite lands at a random moment of the refresh it races (which plans for about a
        # second first): one right at the barrier would come before the refresh reads anything.
        time.sleep(rng.uniform(0.3, 1.5))
        for target in targets:
            try:
                DeltaTable(target).optimize.z_order(["__dvm_row_id"])
                rewrites += 1
            except (CommitFailedError, DeltaError, OSError):
                lost += 1  # a refresh committed first (or the table is being replaced)
        time.sleep(rng.uniform(1.0, 3.0))  # then a pause: the loser's next attempt can commit
    return {"rewrites": rewrites, "rewrites_lost": lost}


def request(name: str, work: str, full: bool = False):
    from python_helpers.runtime.api import RefreshRequest

    return RefreshRequest(
        model=f"model.drill.{name}",
        schema=TARGET,
        identifier=name,
        sql=STREAMS[name],
        full_refresh=full,
        sources=paths(work),
        engine=ENGINE,
        # the drills kill differential refreshes: auto must not learn its way to full ones
        auto_from_history=False,
    )


def refresh(spark, work: str, full: bool = False) -> dict:
    from python_helpers.runtime.api import refresh_stream_table

    said, modes = [], {}
    for name in STREAMS:
        result = refresh_stream_table(spark, request(name, work, full), log=lambda lvl, text: said.append(text))
        modes[name] = result.mode
    return {"modes": modes, "retries": sum("starting over" in t for t in said)}


def check(spark, work: str) -> dict:
    from tests.support.oracle import assert_matches_recompute

    out = refresh(spark, work)
    for name, sql in STREAMS.items():
        assert_matches_recompute(spark, f"{TARGET}.{name}", sql, paths(work), context=name)
    out["source_views"] = check_state(spark, work)
    return out


def check_state(spark, work: str) -> int:
    """Beyond the rows, what a repairing refresh must leave: every stored result's offsets at
    its sources' newest versions (status read from the Delta logs), the model's view in the
    catalog, and each source view published at a source's name showing exactly the rows of the
    source's newest version. Returns how many source views it checked."""
    from deltalake import DeltaTable

    from python_helpers.runtime.status import schema_status

    statuses = {s.name: s for s in schema_status(spark, TARGET)}
    assert sorted(statuses) == sorted(STREAMS), sorted(statuses)
    for name, status in statuses.items():
        behind = {s.relation: (s.consumed_version, s.current_version) for s in status.sources}
        assert status.commits_behind == 0, f"{name}: offsets behind the sources: {behind}"
        assert spark.catalog.tableExists(f"{TARGET}.{name}"), f"{TARGET}.{name} is not in the catalog"
    views = 0
    for relation, path in paths(work).items():
        if not spark.catalog.tableExists(relation):
            continue
        # Row for row: a view left on an older generation can hold as many rows as the newest.
        frame = spark.table(relation)
        shown = sorted((tuple(r) for r in frame.collect()), key=repr)
        table = DeltaTable(path).to_pyarrow_table()
        newest = sorted(zip(*(table.column(c).to_pylist() for c in frame.columns)), key=repr)
        missing = [r for r in newest if r not in shown][:5]
        extra = [r for r in shown if r not in newest][:5]
        assert shown == newest, (
            f"the view {relation} does not show the source's newest version: {len(shown)} rows against "
            f"{len(newest)}, missing {missing}, extra {extra}"
        )
        views += 1
    return views


def _option(argv: list, name: str, default: str | None = None) -> tuple[list, str | None]:
    if name not in argv:
        return argv, default
    at = argv.index(name)
    return argv[:at] + argv[at + 2 :], argv[at + 1]


def wait_for_round(barrier: str, me: str, round_: int, timeout: float = 300) -> None:
    """Say this process is ready for `round_`, and wait until every process is."""
    import time

    open(os.path.join(barrier, f"ready-{round_}-{me}"), "w").close()
    members = [n for n in os.listdir(barrier) if n.startswith("member-")]
    deadline = time.time() + timeout
    while time.time() < deadline:
        ready = [n for n in os.listdir(barrier) if n.startswith(f"ready-{round_}-")]
        if len(ready) >= len(members):
            return
        time.sleep(0.01)
    raise SystemExit(f"round {round_}: the other drill processes never got ready")


def main(argv: list) -> None:
    global ENGINE
    argv, metastore = _option(argv, "--metastore", "metastore")
    argv, remote = _option(argv, "--remote")
    argv, prefix = _option(argv, "--prefix")
    argv, barrier = _option(argv, "--barrier")
    argv, warehouse = _option(argv, "--warehouse")
    argv, engine = _option(argv, "--engine")
    argv, models = _option(argv, "--models")
    ENGINE = engine or ENGINE
    if prefix or models:
        use_prefix(prefix or "d", models.split(",") if models else None)
    work = argv[1]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from python_helpers.runtime.delta.embedded import housekeeping
    from python_helpers.runtime.delta.spark import engine as spark_engine
    from python_helpers.runtime.refresh import steps

    # let the drills reach the vacuum step, on either engine
    housekeeping.VACUUM_EVERY = spark_engine.VACUUM_EVERY = 2
    spark = None
    for action in argv[2:]:
        name, _, arg = action.partition(":")
        if name == "setup":
            setup(work)
            emit(action=action)
            continue
        if name == "change":
            change(work, int(arg))
            emit(action=action)
            continue
        if name == "kill":
            os.environ[steps.KILL_AT] = arg
            continue
        if name == "trace":
            if arg:
                os.environ[steps.TRACE] = arg
            else:
                os.environ.pop(steps.TRACE, None)
            continue
        if spark is None:
            spark = session(work, metastore or "metastore", remote, warehouse)
            spark.sql(f"CREATE DATABASE IF NOT EXISTS {TARGET}")
        if name == "refresh":
            emit(action=action, **refresh(spark, work))
        elif name == "full":
            emit(action=action, **refresh(spark, work, full=True))
        elif name == "check":
            emit(action=action, ok=True, **check(spark, work))
        elif name == "loop":
            from python_helpers.errors import ConcurrentRefresh

            n_text, seed_text, *rest = arg.split(":")
            n, seed, kind = int(n_text), int(seed_text), (rest[0] if rest else "differential")
            lost, retries, done, rewrites = 0, 0, 0, {"rewrites": 0, "rewrites_lost": 0}
            for i in range(n):
                compactor = kind == "compact" and seed == 2
                if kind == "offsets":
                    change_unread(work, seed * 1000 + i)
                elif not compactor:
                    change(work, seed * 1000 + i)
                if barrier:
                    wait_for_round(barrier, str(seed), i)
                if compactor:
                    for key, value in compact_until(spark, os.path.join(barrier or work, f"done-{i}")).items():
                        rewrites[key] += value
                    done += 1
                    continue
                try:
                    retries += refresh(spark, work, full=kind == "full")["retries"]
                    done += 1
                except ConcurrentRefresh:
                    lost += 1
                if kind == "compact":
                    open(os.path.join(barrier or work, f"done-{i}"), "w").close()
            emit(action=action, kind=kind, refreshes=done, gave_up=lost, retries=retries, **rewrites)
        else:
            raise SystemExit(f"unknown action {action}")
        os.environ.pop(steps.KILL_AT, None)


if __name__ == "__main__":
    main(sys.argv)
