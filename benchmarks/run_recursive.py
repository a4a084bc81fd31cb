"""FULL vs DIFFERENTIAL refresh of a WITH RECURSIVE stream table, in one warm Spark session.

    .venv/bin/python benchmarks/run_recursive.py                  # 200,000 nodes, 3 cycles
    .venv/bin/python benchmarks/run_recursive.py --nodes 20000 --cycles 2   # a quick look

The data is a random forest (`bench_rec.nodes(id, team, active)`, `bench_rec.edges(parent,
child)`: every node but the roots hangs under an earlier node), and the stream table is the
size and height of every active node's subtree:

    WITH RECURSIVE sub(top, node, depth) AS (
      SELECT id, id, 0 FROM nodes WHERE active
      UNION ALL
      SELECT sub.top, e.child, sub.depth + 1 FROM sub JOIN edges e ON e.parent = sub.node)
    SELECT top, COUNT(*) AS size, MAX(depth) AS height FROM sub GROUP BY top

Two kinds of change are timed, each on its own cycles, FULL and DIFFERENTIAL refreshed over
the same source versions and checked equal:

* base: `--changes` nodes switch `active` (only the recursion's base reads `nodes`): the delta
  recursion starts from those nodes alone (semi-naive);
* edges: `--changes` new leaves are hung under random nodes (the recursive step reads `edges`):
  the step's change is taken over the result at the old version, which is recomputed in full,
  so this costs about a rebuild; measured to show it.

Prints a table and writes benchmarks/results/recursive_<nodes>.{md,png}.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.run_tpch import _phases, machine, rows_of, spark_session  # noqa: E402

QUERY = """
WITH RECURSIVE sub(top, node, depth) AS (
  SELECT id, id, 0 FROM bench_rec.nodes WHERE active
  UNION ALL
  SELECT sub.top, e.child, sub.depth + 1 FROM sub JOIN bench_rec.edges e ON e.parent = sub.node)
SELECT top, COUNT(*) AS size, MAX(depth) AS height FROM sub GROUP BY top
"""
CDF_ON = {"delta.enableChangeDataFeed": "true"}


def build(root: str, nodes: int, seed: int) -> tuple[dict, int]:
    """A random forest of trees of 5,000 nodes: node i hangs under a random earlier node of its
    tree (a random recursive tree: about ln(5000) ~ 9 levels deep, well under Spark's limit of
    100 recursion levels)."""
    rng = random.Random(seed)
    parents = [None if i % 5000 == 0 else rng.randrange(i - i % 5000, i) for i in range(nodes)]
    paths = {"bench_rec.nodes": os.path.join(root, "nodes"), "bench_rec.edges": os.path.join(root, "edges")}
    write_deltalake(
        paths["bench_rec.nodes"],
        pa.table(
            {
                "id": pa.array(range(nodes), pa.int64()),
                "team": pa.array([i % 50 for i in range(nodes)], pa.int32()),
                "active": pa.array([rng.random() < 0.2 for _ in range(nodes)]),
            }
        ),
        configuration=CDF_ON,
    )
    edges = [(p, c) for c, p in enumerate(parents) if p is not None]
    write_deltalake(
        paths["bench_rec.edges"],
        pa.table(
            {
                "parent": pa.array([p for p, _ in edges], pa.int64()),
                "child": pa.array([c for _, c in edges], pa.int64()),
            }
        ),
        configuration=CDF_ON,
    )
    return paths, nodes


def change_base(paths: dict, rng: random.Random, nodes: int, count: int) -> None:
    ids = ",".join(str(rng.randrange(nodes)) for _ in range(count))
    DeltaTable(paths["bench_rec.nodes"]).update(predicate=f"id IN ({ids})", updates={"active": "NOT active"})


def change_edges(paths: dict, rng: random.Random, next_id: int, count: int) -> int:
    new = list(range(next_id, next_id + count))
    write_deltalake(
        paths["bench_rec.nodes"],
        pa.table(
            {
                "id": pa.array(new, pa.int64()),
                "team": pa.array([0] * count, pa.int32()),
                "active": pa.array([False] * count),
            }
        ),
        mode="append",
    )
    write_deltalake(
        paths["bench_rec.edges"],
        pa.table(
            {"parent": pa.array([rng.randrange(next_id) for _ in new], pa.int64()), "child": pa.array(new, pa.int64())}
        ),
        mode="append",
    )
    return next_id + count


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--changes", type=int, default=100, help="changed rows per cycle (default 100)")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    args = parser.parse_args(argv)

    from python_helpers.runtime.api import RefreshRequest, refresh_stream_table

    work = tempfile.mkdtemp(prefix="dvm-bench-rec-")
    spark = spark_session(work)
    print(f"machine: {machine()}", flush=True)
    paths, next_id = build(os.path.join(work, "sources"), args.nodes, seed=7)

    def refresh(mode: str):
        ident = f"subtrees_{mode}"
        request = RefreshRequest(
            model=ident,
            schema="bench",
            identifier=ident,
            sql=QUERY,
            refresh_mode=mode,
            sources=dict(paths),
            auto_full_threshold=0,
        )
        return refresh_stream_table(spark, request, log=lambda level, text: None)

    for mode in ("full", "differential"):
        built = refresh(mode)
        print(f"build ({mode}): {built.rows_changed} subtrees in {built.seconds:.2f}s", flush=True)
    rng = random.Random(11)
    results: dict[str, dict[str, list[float]]] = {
        "base": {"full": [], "differential": [], "rows": []},
        "edges": {"full": [], "differential": [], "rows": []},
    }
    for kind in ("base", "edges"):
        for cycle in range(args.cycles):
            if kind == "base":
                change_base(paths, rng, args.nodes, args.changes)
            else:
                next_id = change_edges(paths, rng, next_id, args.changes)
            full, diff = refresh("full"), refresh("differential")
            same = rows_of(spark, "bench.subtrees_full") == rows_of(spark, "bench.subtrees_differential")
            results[kind]["full"].append(full.seconds)
            results[kind]["differential"].append(diff.seconds)
            results[kind]["rows"].append(diff.rows_changed)
            print(
                f"  {kind} cycle {cycle + 1}: full {full.seconds:.2f}s, {diff.mode} {diff.seconds:.2f}s "
                f"({diff.rows_changed} subtrees changed; {_phases(diff.phases)}), equal={same}",
                flush=True,
            )
            if not same or diff.mode != "differential":
                print("  !! the differential refresh differs from the full one", file=sys.stderr)
                return 1

    lines = [
        f"# WITH RECURSIVE: FULL vs DIFFERENTIAL ({args.nodes:,} nodes, {args.changes} changed rows "
        f"per cycle, {args.cycles} cycles, medians)",
        "",
        f"Machine: {machine()}",
        "",
        "| change | FULL (s) | DIFFERENTIAL (s) | FULL / DIFFERENTIAL | subtrees changed |",
        "|---|---|---|---|---|",
    ]
    for kind, r in results.items():
        f, d = statistics.median(r["full"]), statistics.median(r["differential"])
        lines.append(f"| {kind} | {f:.2f} | {d:.2f} | {f / d:.1f}x | {statistics.median(r['rows']):.0f} |")
    report = "\n".join(lines)
    print()
    print(report)
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"recursive_{args.nodes}")
    with open(stem + ".md", "w") as handle:
        handle.write(report + "\n")
    chart(results, stem + ".png", f"WITH RECURSIVE subtree sizes, {args.nodes:,} nodes, {args.changes} changes")
    print(f"\nwrote {stem}.md and {stem}.png")
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return 0


def chart(results: dict, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = list(results)
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = range(len(kinds))
    ax.bar([x - 0.2 for x in xs], [statistics.median(results[k]["full"]) for k in kinds], 0.4, label="FULL")
    ax.bar(
        [x + 0.2 for x in xs], [statistics.median(results[k]["differential"]) for k in kinds], 0.4, label="DIFFERENTIAL"
    )
    ax.set_xticks(list(xs), [f"{k} change" for k in kinds])
    ax.set_ylabel("refresh seconds (median)")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
