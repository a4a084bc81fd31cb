"""All 22 TPC-H queries as stream tables through refresh cycles, against the oracle.

Data: duckdb's dbgen at DVM_TPCH_SF (default 0.01), loaded as Delta sources with the change
feed on. Each cycle applies RF1, RF2 and RF3 (tests/tpch/refresh_functions.py) in turn; after
each one every stream table is refreshed, must report `differential`, and must equal its query
recomputed on the same source versions. DVM_TPCH_CYCLES sets the number of cycles (default 1).

`make test` takes a sixth of the queries a day (tests/support/rotation.py: DVM_ROTATION=6,
so all 22 run in any six days; the log names the day to repeat): the 22 together took 311 s
alone on this 2-core machine and 426 s beside the other worker, the largest item of the suite.
`make test-long` runs all 22.

The longer run:  DVM_TPCH_SF=0.1 DVM_TPCH_CYCLES=3 .venv/bin/python -m pytest tests/tpch -s

The table of (query x step: mode, rows changed, ms) is printed at the end (-s shows it) and
written to .work/tpch_cycles.md.
"""

from __future__ import annotations

import os
import time

import pytest

from python_helpers.testing.tpch_queries import QUERIES
from tests.support import rotation
from tests.support.harness import StreamEnv
from tests.tpch.refresh_functions import RefreshFunctions, load_sources

pytestmark = [pytest.mark.spark, pytest.mark.tpch]

SCALE = float(os.environ.get("DVM_TPCH_SF", "0.01"))
CYCLES = int(os.environ.get("DVM_TPCH_CYCLES", "1"))


def test_tpch_queries_stay_equal_to_recompute_through_refresh_cycles(spark):
    env = StreamEnv(spark, tag="tpch")
    started = time.perf_counter()
    env.paths.update(load_sources(SCALE, env.source_path))
    print(f"\nTPC-H SF {SCALE}: sources loaded in {time.perf_counter() - started:.1f} s")
    names = rotation.todays(sorted(QUERIES))
    print(f"TPC-H queries today ({rotation.where()}): {', '.join(names)}")
    # An oracle of the delta rules: `auto` must not swap them for a rebuild (Q15's scalar MAX).
    streams = {name: env.stream(name, QUERIES[name], refresh_mode="differential") for name in names}
    rf = RefreshFunctions(env.paths)
    table: dict = {name: [] for name in streams}
    failures: dict = {}

    def step(label: str, expect: str):
        for name, stream in streams.items():
            if name in failures:
                table[name].append(f"{label}: skipped")
                continue
            try:
                result = stream.refresh()
                stream.check()
                table[name].append(f"{result.mode[:4]} {result.rows_changed} {result.seconds * 1000:.0f}")
                if result.mode != expect:
                    failures[name] = f"{label}: {result.mode} refresh (reason: {result.reason})"
            except Exception as exc:  # noqa: BLE001 - every query's failure is reported below
                failures[name] = f"{label}: {type(exc).__name__}: {str(exc)[:3000]}"
                table[name].append(f"{label}: FAILED")
        print(
            f"  {label}: {len(streams) - len(failures)}/{len(streams)} ok ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )

    step("build", "full")
    labels = ["build"]
    for cycle in range(1, CYCLES + 1):
        for rf_name, apply in rf.functions():
            what = apply()
            env.log.append(what)
            print(f"cycle {cycle} {what}")
            label = f"c{cycle} {rf_name}"
            labels.append(label)
            step(label, "differential")
    env.reads.close()
    report = _report(labels, table)
    print(report)
    os.makedirs(".work", exist_ok=True)
    with open(os.path.join(".work", "tpch_cycles.md"), "w") as out:
        out.write(f"TPC-H SF {SCALE}, {CYCLES} cycle(s): mode rows_changed ms\n\n{report}\n")
    assert not failures, "\n\n".join(f"=== {n} ===\n{t}" for n, t in failures.items())


def _report(labels: list, table: dict) -> str:
    lines = ["| query | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(cells) + " |" for name, cells in table.items()]
    return "\n".join(lines)
