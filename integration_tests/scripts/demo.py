"""`make demo`: build stream tables, change their sources, refresh them, test them.

1. create the Delta sources shop.orders / shop.customers (scripts/shop_data.py create):
   10,000,000 orders of 1,000,000 customers unless told (--orders, --customers), in about a
   minute; 2,000,000 of 200,000 on the spark engine, whose Delta commands cost more each. At
   2,000,000 a refresh is mostly fixed cost (the embedded engine's differential refreshes were a
   median 1.6x faster than their builds, 3 to 5 of 16 slower); at 10,000,000 the change is what
   they pay for (3.9x, 14 of 15 faster)
2. dbt run                  -> every stream table is built in full
3. mutate the sources       -> a few dozen inserts, updates (group and join keys too), deletes
4. dbt run                  -> every stream table refreshes differentially where `auto` allows
5. mutate, dbt run again    -> `auto` now has each model's own history: a model whose
                               differential refresh took more than 1.1x its full build refreshes
                               in full, and says so
6. dbt test                 -> each stream table equals its query recomputed on the sources
7. print, per model, the full build beside both refreshes (dbt's execution_time, from
   target/run_results.json) and how many times faster each was

Each `dbt run` starts a fresh JVM, whose first heavy queries pay seconds of class loading and
compilation. They would land on whichever model first has work (the first model of a build
run can be a cheap one, and in a refresh run the first can be one that skips its work), and
distort that model's ratio: so every run first warms the JVM up (on-run-start,
macros/warm_up.sql: a join and aggregate over part of the sources), and the demo prints how long
that took, outside every model's time.

One dbt thread unless told (--threads): two models' Spark jobs on one local Spark queue behind
each other's stages (Spark schedules an application's jobs first in, first out), so with two
threads a model's time holds part of its neighbour's and the table would not show what a
refresh costs.

larger_orders (a subquery correlated by a non-equality, so refreshed in full every time)
compares every order with every other order: its work grows with the square of the orders, so
the demo leaves it out above 20,000 orders (`--orders 300 --customers 60`, the tests' size,
runs every model).

`--engine spark` (`make demo-spark`) runs the same steps on a local Spark with Delta Lake loaded
(the jars `make jars` fetched; profile target `local_delta`): stream tables are then Delta tables
in the catalog, written and merged by Spark. The default is the embedded engine, which needs no
jars.

Everything it writes lives under $DBT_SPARK_STREAM_WORK_DIR (default: .work/demo in the
repository), which is emptied first; dbt's target/ and logs/ are in integration_tests/.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from python_helpers.testing import delta_lake, run_results

SCRIPTS = Path(__file__).resolve().parent
PROJECT = SCRIPTS.parent
REPO = PROJECT.parent


def dbt_executable() -> str:
    local = Path(sys.executable).parent / "dbt"
    return str(local) if local.exists() else (shutil.which("dbt") or "dbt")


def step(title: str) -> None:
    print(f"\n=== {title} ===", flush=True)


TARGET = {"embedded": "local", "spark": "local_delta"}
_target = TARGET["embedded"]


QUADRATIC = ["larger_orders", "larger_orders_recompute"]  # see the module's text
QUADRATIC_LIMIT = 20_000  # orders
_exclude: list = []
_options: list = []  # for run and test


def dbt(*args: str, check: bool = True) -> int:
    cmd = [dbt_executable(), *args, *_options, *(["--exclude", *_exclude] if _exclude else [])]
    cmd += ["--project-dir", str(PROJECT), "--profiles-dir", str(PROJECT), "--target", _target]
    print("$ dbt " + " ".join(args), flush=True)
    code = subprocess.call(cmd, cwd=PROJECT)
    if code != 0 and check:
        sys.exit(f"demo: `dbt {' '.join(args)}` failed (exit {code}); see {PROJECT / 'logs' / 'dbt.log'}")
    return code


def shop_data(*args: str) -> None:
    subprocess.check_call([sys.executable, str(SCRIPTS / "shop_data.py"), *args])


def main(argv=None) -> None:
    global _target, _exclude
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=sorted(TARGET), default="embedded")
    parser.add_argument("--orders", type=int, help="10,000,000; 2,000,000 with --engine spark")
    parser.add_argument("--customers", type=int, help="a tenth of the orders")
    # One thread: each model's time is its own (the module's text).
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if args.orders is None:
        args.orders = 2_000_000 if args.engine == "spark" else 10_000_000
    if args.customers is None:
        args.customers = max(1, args.orders // 10)
    _target = TARGET[args.engine]
    _exclude = QUADRATIC if args.orders > QUADRATIC_LIMIT else []
    _options[:] = ["--threads", str(args.threads)]
    if args.engine == "spark":
        missing = delta_lake.missing()
        if missing:
            sys.exit(f"demo --engine spark: {missing}")
        os.environ["DBT_SPARK_STREAM_DELTA_JAR_LIST"] = ",".join(delta_lake.jars())
    work = Path(os.environ.get("DBT_SPARK_STREAM_WORK_DIR") or REPO / ".work" / "demo").resolve()
    os.environ["DBT_SPARK_STREAM_WORK_DIR"] = str(work)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    print(f"engine: {args.engine}; work dir (warehouse, metastore, sources): {work}")

    step("1. create the Delta sources")
    shop_data("create", "--customers", str(args.customers), "--orders", str(args.orders))
    if _exclude:
        print(f"(larger_orders is left out: its work grows with the square of the {args.orders:,} orders)")
    warm_ups: list = []

    def run() -> dict:
        # The JVM warmed up first (macros/warm_up.sql): see the module's text.
        dbt("run", "--vars", "{warm_up_jvm: true}")
        results = run_results.load(PROJECT)
        warm_ups.append(run_results.warm_up_seconds(results))
        return run_results.refreshes(results)

    step("2. first dbt run: build every stream table")
    first = run()
    step("3. change the sources")
    shop_data("mutate", "--seed", "1")
    step("4. second dbt run: refresh from the change data feed")
    second = run()
    step("5. change the sources again, third dbt run: `auto` has each model's history now")
    shop_data("mutate", "--seed", "2")
    third = run()
    step("6. dbt test: every stream table equals its query recomputed")
    test_code = dbt("test", check=False)

    step("7. what each refresh did (target/run_results.json, adapter_response)")
    print(run_results.format_table([("run 1", first), ("run 2", second), ("run 3", third)]))
    step("8. each refresh beside the full build (dbt's execution_time per model)")
    print(run_results.format_benefit(first, second, third))
    print(
        "each run first warmed its new JVM up (a join and aggregate over part of the sources: "
        + ", ".join(f"{s:.1f}" for s in warm_ups)
        + " s), in none of the models' times"
    )
    if test_code != 0:
        sys.exit(f"\ndemo: dbt test failed (exit {test_code}); see {PROJECT / 'logs' / 'dbt.log'}")
    print("\ndbt test passed: every stream table equals its query recomputed on the changed sources.")


if __name__ == "__main__":
    main()
