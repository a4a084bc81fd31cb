"""Rule 4 of auto.py, the read cost: everything a differential refresh's delta SQL reads,
judged from the Delta logs before each read is paid (read_cost.py estimates one query), against
the bytes a rebuild reads and writes."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from sqlglot import exp

from python_helpers.dvm.sqlgen import Context, is_part_of_final, keyed_rows, known_empty
from python_helpers.runtime.delta.base import Bindings
from python_helpers.runtime.refresh import read_cost
from python_helpers.runtime.refresh.auto import READ_COST, FullIsCheaper, learned_read_bar
from python_helpers.runtime.refresh.requests import RefreshRequest

# Judged again ahead before each intermediate after the first, up to this many: each judgement
# renders the whole delta SQL once more (sqlglot, in the dbt process).
AHEAD_AGAIN_LIMIT = 4

# What is computed before the final query may read at most this many times the bytes a rebuild
# reads and writes: those reads are paid before the final query, the MERGE and the fixed cost,
# which come on top. Below the final query's 2x (read_cost.FULL_WHEN_READ_RATIO_OVER, whose
# margin is for reads that statistics or Spark's run-time pruning leave out): TPC-H Q20's
# intermediate, lineitem at both versions for the changed pairs of a `forest` part, was
# estimated at 1.8-1.9x and took 1.5-1.9x a rebuild's time at SF 1 and SF 10; the differential
# refreshes of all 22 queries at SF 1 faster than their rebuilds were estimated at 1.47x or less
# in all. The final query's own rows computed ahead of it (sqlgen.part_of_final: the MERGE rows'
# delta, an aggregate's groups) are judged as the final query.
FIRST_READ_RATIO_OVER = 1.5


class _ReadsNothing:
    """A keyed read (Context.keyed_snapshot) that stands in as a relation of no counted bytes,
    its rows kept by a key list (the leanest rendering), and computes nothing."""

    def __init__(self):
        self.made = 0

    def __call__(self, *_args, **_kwargs) -> exp.Expr:
        self.made += 1
        return keyed_rows(exp.to_table(f"__dvm_ahead_keyed_{self.made}"))


class ReadBudget:
    """Rule 4 over everything the delta SQL reads, judged before each read is paid.

    Some intermediates are computed first and served as views (ctx.materialize: a small delta
    named twice, the groups a MIN/MAX may rescan, a key-restricted operator's keys). Each is
    judged before it runs, with what the ones before it read; the final query's estimate adds
    them all (each read once; the final query reads their results, not the snapshots). A rule
    judged only on the final query would see none of their reads, after they were paid."""

    def __init__(
        self,
        request: RefreshRequest,
        bindings: Bindings,
        counters: dict,
        rebuild_writes: int = 0,
        history: Optional[list] = None,
    ):
        self.request, self.bindings, self.counters = request, bindings, counters
        # The bar this model's own history taught (learned_read_bar), under auto_from_history.
        self.learned = learned_read_bar(history or []) if request.auto_from_history else None
        # A rebuild reads every source once and writes the whole result: the stored result's
        # bytes (a wide result, one row per order, costs a rebuild more to write than to read).
        self.rebuild_writes = rebuild_writes
        self.spent = read_cost.ReadEstimate(0, 0, 0)  # what the materialized intermediates read
        self._full_bytes: Optional[int] = None
        self._full_known = False
        # Set by a check_ahead that let the refresh go on: its judgement, made again as
        # intermediates are computed (the relations they were served as, in order).
        self._judge_again: Optional[Callable[[], bool]] = None
        self._served: list = []

    def guard(self, materialize: Callable[[exp.Expr], exp.Expr]) -> Callable[[exp.Expr], exp.Expr]:
        def judged(query: exp.Expr) -> exp.Expr:
            # Only after an intermediate that holds rows: an empty one is what the last
            # judgement took it to be, and it adds nothing new.
            if (
                self._judge_again is not None
                and 0 < len(self._served) <= AHEAD_AGAIN_LIMIT
                and not known_empty(self._served[-1])
            ):
                self._judge_again()
            estimate = self.check(query, first=not is_part_of_final(query))
            if estimate is not None:
                self.spent = estimate
            served = materialize(query)
            self._served.append(served.copy())
            return served

        return judged

    def check_ahead(self, ctx: Context, render: Callable[[Context], Optional[exp.Expr]]) -> None:
        """Rule 4 over the whole delta SQL before any intermediate is computed, where the answer
        cannot depend on them. `guard` judges each intermediate with what was computed before
        it, so the last reads that tip the total over the bar are only seen after the
        intermediates were paid (TPC-H Q20 at SF 10: 6.9 s of them before a 3.9 s rebuild).
        Here the SQL is rendered with every intermediate left in place and taken as empty
        (`render(ctx)` with a context whose materialize computes nothing and serves an empty
        relation, counting the query's reads where it would be computed; a source read for keys
        in the dbt process counts nothing, and nothing is read but, in the second pass below,
        the embedded engine's Arrow reads of a few keys' rows, kept for the refresh). The reads that meet an empty
        intermediate drop out, as they do once it is computed, so this is at most what the
        refresh's own estimate will count: over the bar even so, it goes full now. Otherwise
        the intermediates' rows decide, and they are computed and judged as they come (taken to
        hold rows instead, Q20 at SF 1 under scattered updates read 3.9x a rebuild's bytes; its
        intermediates, computed, let it refresh differentially in 1.07 s against 1.10 s)."""
        if self.request.refresh_mode != "auto" or ctx.materialize is None or self._full() is None:
            return
        # First with every keyed read standing in as reading nothing: the engine lists a change's
        # keys and their range for them, a Spark job each over a change Spark reads (TPC-H Q20 at
        # SF 10 under the refresh functions: 3.2 s), which a refresh that goes full all the same
        # does not need. Less than the least, so over the bar it is decided; where it made a
        # keyed read, judged again with the real ones.
        stand_in = _ReadsNothing() if ctx.keyed_snapshot is not None else None
        passed = self._judge_ahead(dataclasses.replace(ctx, keyed_snapshot=stand_in) if stand_in else ctx, render)
        if stand_in is not None and stand_in.made:
            passed = self._judge_ahead(ctx, render)
        if passed:
            # A copy: a recursion's rules rebind the refresh's own context while it renders.
            kept = dataclasses.replace(ctx, changed=set(ctx.changed), consolidated=set(ctx.consolidated))
            self._judge_again = lambda: self._judge_ahead(kept, render)

    def _judge_ahead(self, ctx: Context, render: Callable[[Context], Optional[exp.Expr]]) -> bool:
        """The least the refresh can still read, over the bar: full now. Judged again before each
        further intermediate, with those computed so far in place (their rows known, their reads
        spent): the first one's rows can put the total over the bar, and each later one paid
        first would be paid for nothing (TPC-H Q20 at SF 10, refresh functions: 19.6 s, most of
        it intermediates, before a 6.3 s rebuild). False when there is nothing to judge (no
        intermediate left, or the SQL fails to render)."""
        least = self._least_reads(ctx, render)
        if least is None:
            return False
        total, first = least
        # The whole, and what is computed before the final query (FIRST_READ_RATIO_OVER, which
        # guard would meet at the last of them, after paying the ones before).
        judged, reason = total, self._reason(total)
        if reason is None:
            judged, reason = first, self._reason(first, first=True)
        if reason is not None:
            self._record(judged)
            n = len(self._served)
            when = (
                f"judged after {n} of its intermediates {'was' if n == 1 else 'were'} computed"
                if n
                else "judged before its intermediates were computed"
            )
            raise FullIsCheaper(f"{reason} ({when})", READ_COST)
        return True

    def _least_reads(
        self, ctx: Context, render: Callable[[Context], Optional[exp.Expr]]
    ) -> Optional[tuple[read_cost.ReadEstimate, read_cost.ReadEstimate]]:
        """The reads of the delta SQL and its intermediates not computed yet, each taken as
        empty, plus what the computed ones read; and the same without the final query. None when
        nothing is left to compute first, or it fails to render (the refresh meets and reports
        that itself). The rendering is deterministic: its first intermediates are the ones
        computed, in the same order."""
        pending: list = []
        key_reads: list = []
        computed = iter(self._served)

        def counted(query: exp.Expr) -> exp.Expr:
            served = next(computed, None)
            if served is not None:
                return served.copy()
            pending.append(query)
            # Served as BoundViews.materialize serves an empty intermediate.
            return exp.select("*").from_(exp.to_table(f"__dvm_ahead_{len(pending)}")).where(exp.false(), copy=False)

        def read_for_keys(relation: str, version: str, pairs: list, keys: exp.Expr) -> exp.Expr:
            # A source read for keys in the dbt process (the embedded engine's key reads) stands
            # in as a relation of no counted bytes: it reads at least nothing, and without it the
            # SQL would read the whole source where the refresh reads a few of its files.
            key_reads.append(relation)
            return exp.to_table(f"__dvm_ahead_k{len(key_reads)}")

        by_keys = read_for_keys if ctx.rows_for_keys is not None else None
        try:
            merge = render(dataclasses.replace(ctx, materialize=counted, rows_for_keys=by_keys))
        except Exception:  # noqa: BLE001 - see above
            return None
        if merge is None or not pending:
            return None
        views, full_bytes = self.bindings.read_bytes(), self._full() or 0
        parts = [read_cost.estimate(q, views, full_bytes) for q in [*pending, merge]]
        spent = read_cost.ReadEstimate(0, full_bytes, 0).plus(self.spent)
        # What is computed before the final query: not the final query's own rows computed ahead.
        first = [part for part, q in zip(parts, pending) if not is_part_of_final(q)]
        return spent.plus(*parts), spent.plus(*first)

    def _reason(self, estimate: read_cost.ReadEstimate, first: bool = False) -> Optional[str]:
        """Why the estimate says full: over the bar (2x; for what is computed before the final
        query, `first`, FIRST_READ_RATIO_OVER), or at least the estimate of one of this model's
        differential refreshes that took longer than a rebuild (learned_read_bar)."""
        bar = read_cost.FULL_WHEN_READ_RATIO_OVER
        reader = "the differential refresh"
        if first:
            bar, reader = min(bar, FIRST_READ_RATIO_OVER), "the intermediates the differential refresh computes first"
        reason = estimate.full_reason(bar, read_cost.MIN_FULL_BYTES, reader)
        if reason is None and self.learned is not None:
            bar, measured = self.learned
            reason = estimate.learned_reason(bar, measured, read_cost.MIN_FULL_BYTES)
        if reason is not None and self.request.refresh_mode == "auto":
            # The bar it was held to, beside its ratio, where it sends the refresh to full (the
            # history's later reasons name both).
            self.counters["read_bar_pct"] = read_cost.percent(bar)
        return reason

    def _record(self, estimate: read_cost.ReadEstimate) -> None:
        """The estimate in the refresh's counters (adapter_response, the history)."""
        self.counters.update(
            read_bytes=estimate.differential_bytes,
            full_read_bytes=estimate.full_bytes,
            read_ratio_pct=read_cost.percent(estimate.ratio),
        )

    def _full(self) -> Optional[int]:
        """What a rebuild reads and writes (None: the rule does not apply), once per refresh: it
        opens every source's log."""
        if not self._full_known:
            read = self.bindings.full_read_bytes()
            self._full_bytes = None if read is None else read + self.rebuild_writes
            self._full_known = True
        return self._full_bytes

    def check(self, query: exp.Expr, first: bool = False) -> Optional[read_cost.ReadEstimate]:
        """Raise FullIsCheaper (under `auto`) when `query`, with what was materialized before
        it, reads more than the bar times the bytes a rebuild reads and writes (read_cost.py;
        `first`: an intermediate, computed before the final query), judged from the Delta logs
        before the query runs. None when the engine cannot tell without reading."""
        full_bytes = self._full()
        if full_bytes is None:
            return None  # the rule does not apply
        own = read_cost.estimate(query, self.bindings.read_bytes(), full_bytes)
        estimate = own.plus(self.spent)
        self._record(estimate)
        reason = self._reason(estimate, first)
        if reason is not None and self.request.refresh_mode == "auto":
            raise FullIsCheaper(reason, READ_COST)
        return estimate
