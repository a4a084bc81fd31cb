"""What `refresh_mode='auto'` does once a refresh could run differentially: the rules that make
it give way to a full refresh, all here.

decide.py settles first whether a differential refresh is possible at all (a first build, a
changed model, a recreated source...); then, inside the differential refresh and before
anything is written, these rules may find a rebuild cheaper and raise FullIsCheaper, which
run.py turns into a full refresh with the rule's reason:
1. history (`check_history`): the model's own past refreshes (costs.py) say a differential
   refresh of a change this size took longer than a full refresh, or rule 4 sent the newest
   refresh of a comparable change to full (its estimate costs the delta query's planning,
   seconds on a large query: judged once, not every time); judged once the change is counted
   from the Delta log, before it is read;
2. change size (`check_change_size`): a source changed by more than `auto_full_threshold` of
   its rows;
3. the whole input (`check_whole_input`): every changed source lies under a window function
   without PARTITION BY, which a differential refresh computes over its whole input at both
   versions (twice a rebuild's work before the MERGE); or a changed source feeds a scalar
   subquery (a value over a whole relation, joined to every row), computed at both versions,
   whose new value re-reads every row it meets; or every changed source is read by a
   recursion whose step reads one of them, which a differential refresh recomputes at the old
   version in full (a rebuild of the recursion) before it derives the change;
4. read cost (`read_budget.ReadBudget`, which follows the delta SQL as it is rendered): the
   delta SQL, intermediates computed first included, would read several times the bytes a
   rebuild reads and writes (read_cost.py); judged before anything runs where the
   intermediates' rows cannot change the answer, then again before each of the next four
   that follows one holding rows; the bar is 2x, 1.5x for what is computed before the final
   query (read_budget.FIRST_READ_RATIO_OVER), or lower where one of the model's own
   differential refreshes read less and was slower than a rebuild (learned_read_bar, under
   `auto_from_history`);
5. a delta recursion that reaches Spark's limit (differential.recursion_limit; not a cost rule,
   but the same way out).
"""

from __future__ import annotations

from typing import Callable, Optional

from python_helpers.dvm.tree import Aggregate, Filter, Join, Node, Project, Recursive, Scan, Window, walk
from python_helpers.runtime.refresh import costs, read_cost
from python_helpers.runtime.refresh.requests import RefreshRequest

# Below this many change rows of a source a differential refresh is cheap whatever the
# fraction (small tables): the change-size rule is for large deltas, not small tables.
AUTO_FULL_MIN_CHANGE_ROWS = 10_000
# History: go full when the recent differential refreshes of a comparable change took more than
# this times the recent full refreshes (the median of each, up to RECENT of each).
SLOWER_THAN_FULL = 1.1
RECENT = 3
# A past differential refresh is comparable when its change was at most this much larger than
# this one's (a smaller change costs no more: the delta query's work grows with the change).
COMPARABLE_FACTOR = 2
COMPARABLE_SLACK_ROWS = 100
# After this many full refreshes in a row, try a differential refresh again: the data, the
# change or the cluster may have changed since the history was made.
PROBE_AFTER_FULL = 10
# While the first build is the only full refresh measured (it also created the table and its
# views: 1.3-1.6x a later rebuild of TPC-H Q8 at SF 1), at least this many comparable
# differential refreshes taking more than this share of it run one full refresh to measure
# (0.6: a differential refresh 1.1x a rebuild is found under a first build up to 1.8x one).
PROBE_FULL_SHARE = 0.6
MIN_PROBE_EVIDENCE = 2
# Rule 4 learns: a differential refresh of this model whose read estimate was at least this
# share of a rebuild's bytes (percent) and that took more than SLOWER_THAN_FULL its full
# refreshes lowers the model's read bar to that estimate. Below a rebuild's bytes the reads do
# not explain the time (fixed cost, the MERGE), which rule 1 judges.
LEARN_FROM_RATIO_PCT = 100


# Which rule sent a refresh to full, as its history entry records it (costs.entry).
HISTORY = "history"
CHANGE_SIZE = "change_size"
WHOLE_INPUT = "whole_input"
READ_COST = "read_cost"
RECURSION_LIMIT = "recursion_limit"


class FullIsCheaper(Exception):
    """The differential refresh gives way to a full one, for the reason given: one of the rules
    above (`rule`), or a delta recursion that hit Spark's limit."""

    def __init__(self, reason: str, rule: str):
        super().__init__(reason)
        self.rule = rule


def check_history(request: RefreshRequest, history: list, change_rows: int) -> None:
    """Rule 1: from the model's own history (costs.completed), before the change is read."""
    if request.refresh_mode != "auto" or not request.auto_from_history:
        return
    reason = history_reason(history, change_rows) or estimate_reason(history, change_rows)
    if reason is not None:
        raise FullIsCheaper(reason, HISTORY)


def history_reason(history: list, change_rows: int) -> Optional[str]:
    """Why a full refresh is faster for `change_rows` change rows, from a history (costs.py), or
    None: too little history, a differential refresh is due as a probe, or it is not slower.

    The differential refreshes it compares are those of a change at most 2x + 100 rows larger,
    and of them the ones of a similar size (at least half, less 100 rows) when there are any:
    a refresh of a tenth of the change says little of what this one costs. The full refreshes
    are the recent ones after the first build, which also created the table and its views;
    while the first build is the only one measured and the differential refreshes take most
    of its time, one full refresh runs to measure a rebuild (PROBE_FULL_SHARE)."""
    if not history or _probe_due(history):
        return None  # nothing to judge by, or a probe: measure a differential refresh again
    fulls, only_first_build = _recent_fulls(history)
    differentials = _comparable(history, change_rows)
    full_s, differential_s = costs.median_seconds(fulls), costs.median_seconds(differentials)
    if full_s is None or differential_s is None:
        return None
    largest = max(int(e["change_rows"]) for e in differentials)
    n = len(differentials)
    which = "the last differential refresh" if n == 1 else f"the last {n} differential refreshes"
    measured = f"{which} of {largest:,} or fewer change rows took {differential_s:.1f} s{'' if n == 1 else ' (median)'}"
    if differential_s > SLOWER_THAN_FULL * full_s:
        return f"{measured}, a full refresh {full_s:.1f} s: a full refresh is faster for {change_rows:,} change rows"
    if only_first_build and n >= MIN_PROBE_EVIDENCE and differential_s > PROBE_FULL_SHARE * full_s:
        return (
            f"{measured}, close to the first build's {full_s:.1f} s, which also created the table: one full "
            "refresh measures what a rebuild costs"
        )
    return None


FIRST_BUILD = "first build"  # decide.py's reason for a model's first refresh


def _recent_fulls(history: list) -> tuple:
    """(the last RECENT timed full refreshes after the first build, or the first build when it is
    the only one; whether it is)."""
    timed = [e for e in history if e.get("mode") == "full" and e.get("seconds") is not None]
    later = [e for e in timed if e.get("reason") != FIRST_BUILD]
    return (later or timed)[-RECENT:], not later


def _similar_bounds(change_rows: int) -> tuple:
    """(least, most) change rows of a similar change: at least half less 100 rows, at most 2x +
    100 rows. A past change up to `most` is comparable (a smaller one costs no more)."""
    rows = max(0, change_rows)
    return (rows - COMPARABLE_SLACK_ROWS) / COMPARABLE_FACTOR, COMPARABLE_FACTOR * rows + COMPARABLE_SLACK_ROWS


def _comparable(history: list, change_rows: int) -> list:
    """The last RECENT timed differential refreshes of a comparable change: at most 2x + 100
    rows larger, and of those the similar ones (at least half, less 100 rows) if any."""
    least, most = _similar_bounds(change_rows)
    comparable = [
        e
        for e in history
        if e.get("mode") == "differential"
        and e.get("seconds") is not None
        and e.get("change_rows") is not None
        and int(e["change_rows"]) <= most
    ]
    similar = [e for e in comparable if int(e["change_rows"]) >= least]
    return (similar or comparable)[-RECENT:]


def estimate_reason(history: list, change_rows: int) -> Optional[str]:
    """Why a full refresh is cheaper for `change_rows` change rows without estimating the reads
    again, or None. The newest refresh of a comparable change decides: one the read estimate
    (rule 4) sent to full for a change at most 2x + 100 rows larger (reads grow with the change)
    says full; a differential refresh of a similar change (at least half, less 100 rows) says
    measure instead (the timings judge it). The estimate plans the whole delta query, seconds
    on a large one, to reach the same answer; a differential refresh is still probed after
    PROBE_AFTER_FULL full ones."""
    if not history or _probe_due(history):
        return None
    least, most = _similar_bounds(change_rows)
    for e in reversed(history):
        rows = e.get("change_rows")
        if rows is None or int(rows) > most:
            continue
        if e.get("mode") == "differential" and int(rows) >= least:
            return None  # measured at this size since: the timings judge it
        if e.get("rule") == READ_COST:
            ratio, bar = e.get("read_ratio_pct"), e.get("read_bar_pct")
            # Both in hundredths, as stored: a learned bar (1.87x) fires at its value, and a
            # ratio rounded to tenths ("1.9x; its bar 1.87x") would read as over it or under.
            how = f" ({read_cost.ratio_text(ratio / 100)} a rebuild's bytes" if isinstance(ratio, int) else ""
            how += (f"; its bar {read_cost.ratio_text(bar / 100)})" if isinstance(bar, int) else ")") if how else ""
            return (
                f"the read estimate sent a refresh of {int(rows):,} change rows to full{how}: "
                f"a full refresh is cheaper for {change_rows:,} change rows (not estimated again until a "
                f"differential refresh is tried after {PROBE_AFTER_FULL} full ones)"
            )
    return None


def passed_before(request: RefreshRequest, history: list, change_rows: int) -> bool:
    """Did the newest refresh of a similar change (at least half, less 100 rows, at most 2x + 100
    rows) run differentially? Then the read estimate let a change of this size through, and
    rendering the delta SQL ahead to judge it again (read_budget.ReadBudget.check_ahead, and
    again after each intermediate that holds rows) would cost every such refresh its planning
    two or more times for the same answer. Never without `auto_from_history`."""
    if not request.auto_from_history:
        return False
    least, most = _similar_bounds(change_rows)
    for e in reversed(history):
        rows = e.get("change_rows")
        if rows is not None and least <= int(rows) <= most:
            return e.get("mode") == "differential"
    return False


def learned_read_bar(history: list) -> Optional[tuple]:
    """(ratio, what was measured) from which this model's own refreshes say a differential one
    is slower than a rebuild, or None. Rule 4's 2x bar is a prior measured across queries, and
    one model can be slower than a rebuild under it (TPC-H Q20 at SF 10 under scattered updates,
    estimated at 1.9x both times: 4.0 M rows read in 2.9 s one cycle, 132 M rows in 9.2 s
    against a 6.0 s rebuild the next, for a change of the same size, which is all rule 1
    compares; its intermediate is now refused ahead at read_budget.FIRST_READ_RATIO_OVER). So
    the lowest estimate (at least LEARN_FROM_RATIO_PCT) of a timed differential refresh that
    took more than SLOWER_THAN_FULL the recent full refreshes (median) becomes the model's bar
    when it is below 2x: a refresh that would read as much goes full."""
    if _probe_due(history):
        return None  # a differential refresh is due as a probe: measured, not vetoed by the bar
    fulls, _ = _recent_fulls(history)
    full_s = costs.median_seconds(fulls)
    if full_s is None:
        return None
    slow = [
        e
        for e in history
        if e.get("mode") == "differential"
        and e.get("seconds") is not None
        and isinstance(e.get("read_ratio_pct"), int)
        and e["read_ratio_pct"] >= LEARN_FROM_RATIO_PCT
        and float(e["seconds"]) > SLOWER_THAN_FULL * full_s
    ]
    if not slow:
        return None
    least = min(slow, key=lambda e: e["read_ratio_pct"])
    ratio = least["read_ratio_pct"] / 100
    if ratio > read_cost.FULL_WHEN_READ_RATIO_OVER:
        return None
    took = float(least["seconds"])
    measured = f"a differential refresh of this model read {read_cost.ratio_text(ratio)} and took {took:.1f} s"
    return ratio, f"{measured}, a full refresh {full_s:.1f} s"


def check_whole_input(request: RefreshRequest, tree: Node, changed: set, history: list) -> None:
    """Rule 3: judged from the operator tree and which sources changed, before the change is read.
    Yields to history's probe (a differential refresh after PROBE_AFTER_FULL full ones), so the
    choice can be measured.
    - A window without PARTITION BY is recomputed over its whole input at both versions when
      anything under it changed (supported-sql.md, partition recompute); when every changed
      source is under one, no part of the refresh is smaller than a rebuild.
    - An uncorrelated scalar subquery (a global aggregate joined to every row) over a changed
      source is computed at both versions, and a new value meets every row of the other side
      at both: its input read twice and the rest of the query re-read, where a rebuild reads
      each once. Its value nearly always moves with its input (a count, a sum, an average).
    - A WITH RECURSIVE whose step reads a changed source: what the change reaches is derived
      from the old recursion's whole result (ΔF over R_old, dvm/operators/recursive.py), which
      Spark computes in full, so when every changed source is read under recursions the
      refresh does a rebuild's work and more (the demo's `customer_chains`: 11-18 s against a
      7.5-10 s build)."""
    if request.refresh_mode != "auto" or not changed or _probe_due(history):
        return
    read = {n.relation for n in walk(tree) if isinstance(n, Scan) and n.relation in changed}
    if read and not _outside(tree, read, lambda n: isinstance(n, Window) and not n.partition_keys):
        raise FullIsCheaper(
            "a window function without PARTITION BY reads the changed sources: a differential refresh "
            "computes it over its whole input at both versions, twice a rebuild's work",
            WHOLE_INPUT,
        )
    relation = _step_over_changed(tree, changed)
    if relation is not None and not _outside(tree, read, lambda n: isinstance(n, Recursive)):
        raise FullIsCheaper(
            f"a recursive step reads the changed source {relation}: a differential refresh computes the "
            "recursion's old result in full to find what the change reaches, a rebuild's work and more",
            WHOLE_INPUT,
        )
    relation = _scalar_over_changed(tree, changed)
    if relation is not None:
        raise FullIsCheaper(
            f"a scalar subquery reads the changed source {relation}: a differential refresh computes its "
            "value at both versions and, as it changes, re-reads every row it meets; a rebuild reads each once",
            WHOLE_INPUT,
        )


def _outside(node: Node, changed: set, under: Callable[[Node], bool]) -> bool:
    """Is a changed source read somewhere not under a node that `under` picks?"""
    if under(node):
        return False
    if isinstance(node, Scan):
        return node.relation in changed
    return any(_outside(c, changed, under) for c in node.children())


def _step_over_changed(tree: Node, changed: set) -> Optional[str]:
    """A changed source read by a recursion's step (not only by its base), or None."""
    for node in walk(tree):
        if isinstance(node, Recursive):
            found = sorted(
                n.relation for s in node.steps for n in walk(s) if isinstance(n, Scan) and n.relation in changed
            )
            if found:
                return found[0]
    return None


def _scalar_over_changed(tree: Node, changed: set) -> Optional[str]:
    """A changed source read by a scalar side of a cross join (an uncorrelated scalar subquery:
    a global aggregate, under projections and filters), or None."""
    for node in walk(tree):
        if not (isinstance(node, Join) and node.condition is None):
            continue
        for side in (node.left, node.right):
            inner = side
            while isinstance(inner, (Project, Filter)):
                inner = inner.child
            if isinstance(inner, Aggregate) and not inner.keys:
                found = sorted(n.relation for n in walk(inner) if isinstance(n, Scan) and n.relation in changed)
                if found:
                    return found[0]
    return None


def _probe_due(history: list) -> bool:
    """PROBE_AFTER_FULL full refreshes in a row: time to measure a differential one again."""
    since_differential = 0
    for e in reversed(history):
        if e.get("mode") == "differential":
            break
        since_differential += 1
    return since_differential >= PROBE_AFTER_FULL


def check_change_size(request: RefreshRequest, counts: dict, total_rows) -> None:
    """Rule 2: a source changed by more than `auto_full_threshold` of its rows, judged from the
    Delta log before any change is read (the crossover is measured in benchmarks/).
    `total_rows(relation)` counts a source's rows at the pinned version (from the log)."""
    threshold = request.auto_full_threshold
    if request.refresh_mode != "auto" or not threshold:
        return
    for relation, rows in counts.items():
        if rows < AUTO_FULL_MIN_CHANGE_ROWS:
            continue
        total = total_rows(relation)
        if total and rows / total > threshold:
            raise FullIsCheaper(
                f"{rows} change rows of {relation} are {rows / total:.0%} of its {total} rows, "
                f"over auto_full_threshold={threshold:g}: a full refresh is cheaper",
                CHANGE_SIZE,
            )
