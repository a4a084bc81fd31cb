"""Under `auto`: would the differential refresh read more than a rebuild?

A join's or a nested recompute's delta SQL reads the other inputs' snapshots, at the old and
the new version, and nested semi joins and correlated aggregates read them several times. File
statistics narrow many of those reads (Bindings.keyed_snapshot), and what is left is known
before the delta query runs: the bytes of the data files each bound view covers, times the
number of places the SQL reads it (Spark reads a temp view again at every reference). A rebuild
reads every source once and writes the whole result (the stored result's bytes: ReadBudget).
When the first is a multiple of the second the rebuild is cheaper, and the refresh says so in
its reason rather than being slower than `materialized='table'`.

Bytes are whole data files (parquet is columnar, but both sides read the same columns of a
source, so the ratio holds); this is an estimate to catch the refreshes that read several times
what a rebuild does, not a timing model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from sqlglot import exp

from python_helpers.dvm import sqlgen

# A differential refresh that would read more than this many times the bytes a rebuild reads
# and writes goes full under `auto`. Above 1 because a rebuild's write costs more than a read of
# the same bytes while the differential refresh merges a few rows: a join whose other input is
# read in full once (random keys meet every file's min/max) is still faster than a rebuild.
# Measured on TPC-H SF 1 with 1,000 changed rows (results of a few rows, so reads alone): the
# refreshes faster than a rebuild read at most 1.4x a rebuild's bytes, the slower ones (Q4, Q13,
# Q15, Q17, Q18) 2.4x to 16.5x. Counting reads alone, the demo at 10 M orders sent one-row-per-
# order results to full at 2.3-3.7x (their stored result read for its row ids), one of them
# after a differential refresh 1.9x faster than its build.
FULL_WHEN_READ_RATIO_OVER = 2.0
# Sources smaller than this together are not judged: a refresh over them costs its round trips
# and query planning more than its reads.
MIN_FULL_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class ReadEstimate:
    differential_bytes: int  # data files the delta SQL reads, counted once per reference
    full_bytes: int  # every source's data files at the new version, once, and the result a rebuild writes
    references: int  # places the delta SQL reads a bound snapshot or the stored result

    def plus(self, *others: "ReadEstimate") -> "ReadEstimate":
        """These reads and the others', against this estimate's rebuild."""
        return ReadEstimate(
            self.differential_bytes + sum(o.differential_bytes for o in others),
            self.full_bytes,
            self.references + sum(o.references for o in others),
        )

    @property
    def ratio(self) -> float:
        return self.differential_bytes / self.full_bytes if self.full_bytes else 0.0

    def full_reason(
        self,
        threshold: float = FULL_WHEN_READ_RATIO_OVER,
        min_full_bytes: int = MIN_FULL_BYTES,
        reader: str = "the differential refresh",
    ) -> Optional[str]:
        """Why a rebuild is cheaper, or None when the differential refresh should go on."""
        # Compared in whole percent, as it is printed and kept (ratio_text, the history's read_ratio_pct).
        if not self.full_bytes or self.full_bytes < min_full_bytes or percent(self.ratio) <= percent(threshold):
            return None
        return (
            f"{reader} would read {_size(self.differential_bytes)} of snapshots "
            f"({self.references} reads), {ratio_text(self.ratio)} the {_size(self.full_bytes)} a full refresh reads "
            f"and writes (auto switches over {threshold:g}x): a full refresh is cheaper"
        )

    def learned_reason(self, bar: float, measured: str, min_full_bytes: int = MIN_FULL_BYTES) -> Optional[str]:
        """Why a rebuild is faster by a bar the model's own history set (auto.learned_read_bar):
        this refresh would read at least what `measured` read."""
        # Compared in whole percent, as the history keeps it: the estimate it learned from trips it.
        if not self.full_bytes or self.full_bytes < min_full_bytes or percent(self.ratio) < percent(bar):
            return None
        return (
            f"the differential refresh would read {_size(self.differential_bytes)} of snapshots "
            f"({self.references} reads), {ratio_text(self.ratio)} the {_size(self.full_bytes)} a full refresh reads "
            f"and writes; {measured}: a full refresh is faster"
        )


def percent(ratio: float) -> int:
    """A read ratio in whole percent: how every bar compares it, the history keeps it and the
    reasons print it (ratio_text)."""
    return int(round(ratio * 100))


def ratio_text(ratio: float) -> str:
    """A read ratio as every reason prints it: in hundredths, as it is compared ("1.87x")."""
    return f"{percent(ratio) / 100:g}x"


def estimate(query: exp.Expr, view_bytes: dict, full_bytes: int) -> ReadEstimate:
    """The bytes `query` reads through the views named in `view_bytes` (view name -> bytes of
    the files it covers), each reference counted, a CTE's reads counted at each use of it."""
    bodies = {cte.alias_or_name.lower(): cte.this for cte in query.find_all(exp.CTE)}
    sizes = {name.lower(): size for name, size in view_bytes.items()}
    memo: dict = {}

    def cost(node: exp.Expr, seen: frozenset) -> tuple[int, int]:
        total = refs = 0
        skipped = _reused_tables(node) | _pruned_tables(node)
        for table in node.find_all(exp.Table):
            if id(table) in skipped:
                continue
            name = table.name.lower()
            if table.db or not name:
                continue
            if name in sizes:
                total += sizes[name]
                refs += 1
            elif name in bodies and name not in seen:
                # A CTE is inlined by Spark at each reference (a recursive one is read once per
                # iteration; counted once: this stays a lower bound).
                if name not in memo:
                    memo[name] = cost(bodies[name], seen | {name})
                total += memo[name][0]
                refs += memo[name][1]
        return total, refs

    outer = query.copy()
    for cte in list(outer.find_all(exp.CTE)):
        cte.pop()  # the bodies are counted where they are referenced
    differential, references = cost(outer, frozenset())
    return ReadEstimate(differential, int(full_bytes), references)


def _reused_tables(node: exp.Expr) -> set:
    """Tables under a grouped derived table identical to one met before, counted once. Spark
    does not always reuse such a shuffle: the one place the delta SQL names its consolidated
    delta twice (the MERGE rows and the stored row ids they look up) materializes it first
    where the engine can (stored_result.delta_once), and ReadBudget counts that read once."""
    seen: set = set()
    reused: set = set()
    for derived in node.find_all(exp.Subquery):
        inner = derived.this
        if not isinstance(inner, exp.Select) or not inner.args.get("group"):
            continue
        if any(id(t) in reused for t in inner.find_all(exp.Table)):
            continue  # inside a copy already skipped
        text = inner.sql()
        if text in seen:
            reused.update(id(t) for t in inner.find_all(exp.Table))
        seen.add(text)
    return reused


def _empty(relation: Optional[exp.Expr]) -> bool:
    """`SELECT * FROM <view> WHERE FALSE`: how a materialized intermediate with no rows is
    served (sqlgen.known_empty), which Spark's optimizer folds into an empty relation. A global
    aggregate under WHERE FALSE holds a row: its join prunes nothing."""
    while isinstance(relation, exp.Subquery):
        relation = relation.this
    return relation is not None and sqlgen.known_empty(relation)


def _pruned_tables(node: exp.Expr) -> set:
    """Tables under a SELECT that joins an empty relation where the join's result is empty
    (inner, cross, semi; or any but a right or full join from an empty FROM): Spark drops those
    reads from the plan (a group rescan when no group is flagged, a recompute for no keys)."""
    pruned: set = set()
    for select in node.find_all(exp.Select):
        source = select.args.get("from_")
        empty_from = source is not None and _empty(source.this)
        for join in select.args.get("joins") or []:
            kind, side = (join.args.get("kind") or "").upper(), (join.args.get("side") or "").upper()
            empties = kind == "SEMI" or (not side and kind in ("", "INNER", "CROSS"))
            if (_empty(join.this) and empties) or (empty_from and side not in ("RIGHT", "FULL")):
                pruned.update(id(t) for t in select.find_all(exp.Table))
                break
    return pruned


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"
