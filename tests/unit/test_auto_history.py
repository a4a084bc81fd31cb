"""`auto` learning from a model's own refreshes: the history kept in the commit metadata
(runtime/refresh/costs.py) and the rule that reads it (runtime/refresh/auto.py)."""

from __future__ import annotations

import pytest

from python_helpers.runtime.refresh import auto, costs, read_budget, read_cost
from python_helpers.runtime.refresh.auto import FullIsCheaper
from python_helpers.runtime.refresh.requests import RefreshRequest


def _e(mode, seconds, change_rows=None):
    return {"mode": mode, "seconds": seconds, "change_rows": change_rows, "started_ms": 0}


def test_the_next_refresh_completes_the_last_entry_from_its_commit_time():
    first = costs.entry("full", 1_000_000, None, "first build", {"plan": 0.5})
    meta = {"history": costs.extended(None, first), "committed_at_ms": 1_004_250}
    assert meta["history"][-1]["seconds"] is None  # unknown when it committed
    history = costs.completed(meta)
    assert history[-1]["seconds"] == 4.25 and history[-1]["reason"] == "first build"
    # A skewed clock gives no length rather than a wrong one.
    assert costs.completed({"history": [first], "committed_at_ms": 999_000})[-1]["seconds"] is None


def test_history_keeps_the_newest_entries():
    meta = None
    for i in range(costs.HISTORY_KEEP + 5):
        history = costs.extended(meta, costs.entry("differential", i * 1000, i, None, {}))
        meta = {"history": history, "committed_at_ms": i * 1000 + 10}
    assert len(meta["history"]) == costs.HISTORY_KEEP
    assert meta["history"][-1]["change_rows"] == costs.HISTORY_KEEP + 4
    assert all(e["seconds"] == 0.01 for e in meta["history"][:-1])


def test_full_when_comparable_differential_refreshes_were_slower_than_full_ones():
    history = [_e("full", 2.0), _e("differential", 6.0, 900), _e("differential", 6.2, 1100)]
    reason = auto.history_reason(history, 1000)
    assert reason is not None
    assert "the last 2 differential refreshes of 1,100 or fewer change rows took 6.1 s (median)" in reason
    assert "a full refresh 2.0 s" in reason


def test_no_full_without_both_kinds_of_history_or_within_ten_percent():
    assert auto.history_reason([], 10) is None
    assert auto.history_reason([_e("full", 2.0)], 10) is None
    assert auto.history_reason([_e("differential", 9.0, 10)], 10) is None
    assert auto.history_reason([_e("full", 2.0), _e("differential", 2.2, 10)], 10) is None
    # an entry whose length is unknown (the newest, before the next refresh) does not count
    assert auto.history_reason([_e("full", 2.0), _e("differential", None, 10)], 10) is None


def test_a_larger_past_change_says_nothing_about_a_smaller_one():
    history = [_e("full", 2.0), _e("differential", 30.0, 50_000)]
    assert auto.history_reason(history, 1_000) is None
    assert auto.history_reason(history, 40_000) is not None  # comparable: at most 2x + 100 larger


def test_a_differential_refresh_is_tried_again_after_many_full_ones():
    history = [_e("full", 2.0), _e("differential", 6.0, 10)] + [_e("full", 2.0)] * (auto.PROBE_AFTER_FULL - 1)
    assert auto.history_reason(history, 10) is not None
    assert auto.history_reason(history + [_e("full", 2.0)], 10) is None


def test_only_auto_with_the_config_on_learns():
    history = [_e("full", 1.0), _e("differential", 5.0, 10)]
    with pytest.raises(FullIsCheaper):
        auto.check_history(RefreshRequest("m", "s", "t", "select 1"), history, 10)
    auto.check_history(RefreshRequest("m", "s", "t", "select 1", refresh_mode="differential"), history, 10)
    auto.check_history(RefreshRequest("m", "s", "t", "select 1", auto_from_history=False), history, 10)


def test_history_rows_one_per_refresh_commit_with_its_versions_and_length():
    from python_helpers.runtime.delta import metadata
    from python_helpers.runtime.history import refresh_rows

    build = costs.entry("full", 1_000, None, "first build", {"plan": 0.2}, statements=9)
    reads = {"files_read": 3, "files_skipped": 9, "read_bytes": 4_096, "change_rows": {"s.t": 42}}
    refresh = costs.entry(
        "differential", 10_000, 42, None, {"plan": 0.1, "changes": 0.3}, read_ratio_pct=35, reads=reads, statements=14
    )
    # The refresh's commit: delta-rs' MERGE metrics. The build's (below): the counts the dbt
    # process put in the metadata of a commit it assembled.
    merged = {"num_target_rows_inserted": 2, "num_target_rows_updated": "5", "num_target_rows_deleted": 1}
    merged.update(num_output_rows=1_008, num_target_files_added=1, num_target_files_removed=1, execution_time_ms=9)
    commits = metadata.refresh_commits(
        [
            (
                2,
                12_500,
                "MERGE",
                metadata.encode(
                    {
                        "mode": "differential",
                        "model": "m",
                        "offsets": {"s.t": {"version": 7}},
                        "history": [build, refresh],
                    }
                ),
                merged,
            ),
            (1, 5_000, "OPTIMIZE", None, {"numFiles": 1}),
            (
                0,
                3_000,
                "WRITE",
                metadata.encode(
                    {
                        "mode": "full",
                        "model": "m",
                        "offsets": {"s.t": {"version": 3}},
                        "history": [build],
                        metadata.WRITTEN: {"rows_written": 1_000, "files_added": 2},
                    }
                ),
                None,
            ),
        ]
    )
    rows = refresh_rows("s", "t", commits)
    assert [r["storage_version"] for r in rows] == [0, 2]
    assert rows[0]["reason"] == "first build" and rows[0]["seconds"] == 2.0 and rows[0]["source_versions_from"] is None
    assert rows[1]["mode"] == "differential" and rows[1]["seconds"] == 2.5 and rows[1]["change_rows"] == 42
    assert rows[1]["source_versions_from"] == '{"s.t": 3}' and rows[1]["source_versions_to"] == '{"s.t": 7}'
    assert (rows[1]["read_ratio_pct"], rows[1]["rule"], rows[0]["read_ratio_pct"]) == (35, None, None)
    counts = ("rows_inserted", "rows_updated", "rows_deleted", "rows_written", "files_added", "files_removed")
    assert [rows[1][c] for c in counts] == [2, 5, 1, 1_008, 1, 1]
    assert [rows[0][c] for c in counts] == [None, None, None, 1_000, 2, None]
    assert (rows[1]["files_read"], rows[1]["files_skipped"], rows[1]["read_bytes"]) == (3, 9, 4_096)
    assert (rows[0]["files_read"], rows[0]["read_bytes"]) == (None, None)
    assert (rows[0]["spark_statements"], rows[1]["spark_statements"]) == (9, 14)
    # A commit made before the history existed still has its row, without a length.
    old = refresh_rows(
        "s",
        "t",
        metadata.refresh_commits([(0, 3_000, "WRITE", metadata.encode({"mode": "full", "offsets": {}}), None)]),
    )
    assert old[0]["mode"] == "full" and old[0]["seconds"] is None and old[0]["started_at"] is None
    assert old[0]["spark_statements"] is None


def _tree(sql: str):
    from python_helpers.dvm.plan_query import query_tree
    from python_helpers.sql.parse import parse_query

    types = {"id": "bigint", "k": "int", "g": "string", "v": "int"}
    tree, _ = query_tree("m", parse_query("m", sql), {"src.t1": dict(types), "src.t2": dict(types)})
    return tree


WHOLE = "SELECT k, SUM(v) AS sv, RANK() OVER (ORDER BY SUM(v) DESC) AS r FROM src.t1 GROUP BY k"


def test_a_window_without_partition_by_over_every_changed_source_refreshes_in_full_under_auto():
    request = RefreshRequest(model="m", schema="s", identifier="m", sql=WHOLE)
    with pytest.raises(FullIsCheaper, match="without PARTITION BY"):
        auto.check_whole_input(request, _tree(WHOLE), {"src.t1"}, [])
    # Asked for differential: the rule is auto's only.
    differential = RefreshRequest(model="m", schema="s", identifier="m", sql=WHOLE, refresh_mode="differential")
    auto.check_whole_input(differential, _tree(WHOLE), {"src.t1"}, [])
    # A probe is due after PROBE_AFTER_FULL full refreshes: measured, not assumed.
    fulls = [_e("differential", 9.0, 10)] + [_e("full", 2.0)] * auto.PROBE_AFTER_FULL
    auto.check_whole_input(request, _tree(WHOLE), {"src.t1"}, fulls)


@pytest.mark.parametrize(
    "sql, changed",
    [
        # a changed source read outside the window too: that part refreshes by its change
        (
            "SELECT w.k, w.r, b.v FROM (SELECT k, RANK() OVER (ORDER BY v) AS r FROM src.t1) w "
            "JOIN src.t2 b ON w.k = b.k",
            {"src.t1", "src.t2"},
        ),
        # partitioned windows recompute only the touched partitions
        ("SELECT k, v, RANK() OVER (PARTITION BY k ORDER BY v) AS r FROM src.t1", {"src.t1"}),
        # nothing under the window changed
        (
            "SELECT w.k, w.r, b.v FROM (SELECT k, RANK() OVER (ORDER BY v) AS r FROM src.t1) w "
            "JOIN src.t2 b ON w.k = b.k",
            {"src.t2"},
        ),
    ],
)
def test_a_window_rule_leaves_differential_refreshes_that_read_less(sql, changed):
    request = RefreshRequest(model="m", schema="s", identifier="m", sql=sql)
    auto.check_whole_input(request, _tree(sql), changed, [])


SHARE = "SELECT g, COUNT(*) AS n, COUNT(*) / (SELECT COUNT(*) FROM src.t1) AS share FROM src.t1 GROUP BY g"


def test_a_scalar_subquery_over_a_changed_source_refreshes_in_full_under_auto():
    request = RefreshRequest(model="m", schema="s", identifier="m", sql=SHARE)
    with pytest.raises(FullIsCheaper, match="scalar subquery reads the changed source src.t1"):
        auto.check_whole_input(request, _tree(SHARE), {"src.t1"}, [])
    above = "SELECT id, v FROM src.t1 WHERE v > (SELECT AVG(v) FROM src.t2)"
    with pytest.raises(FullIsCheaper, match="changed source src.t2"):
        auto.check_whole_input(
            RefreshRequest(model="m", schema="s", identifier="m", sql=above), _tree(above), {"src.t2"}, []
        )
    # Asked for differential, or a probe due: measured, not assumed.
    differential = RefreshRequest(model="m", schema="s", identifier="m", sql=SHARE, refresh_mode="differential")
    auto.check_whole_input(differential, _tree(SHARE), {"src.t1"}, [])
    fulls = [_e("differential", 9.0, 10)] + [_e("full", 2.0)] * auto.PROBE_AFTER_FULL
    auto.check_whole_input(request, _tree(SHARE), {"src.t1"}, fulls)


@pytest.mark.parametrize(
    "sql, changed",
    [
        # the scalar's source did not change: only the rows' own change is read
        ("SELECT id, v FROM src.t1 WHERE v > (SELECT AVG(v) FROM src.t2)", {"src.t1"}),
        # correlated: a grouped aggregate restricted to the changed keys, not a value over everything
        ("SELECT a.id, (SELECT MAX(b.v) FROM src.t2 b WHERE b.k = a.k) AS m FROM src.t1 a", {"src.t2"}),
        # a global aggregate alone keeps its state
        ("SELECT COUNT(*) AS n, SUM(v) AS s FROM src.t1", {"src.t1"}),
    ],
)
def test_the_scalar_rule_leaves_values_that_are_maintained(sql, changed):
    request = RefreshRequest(model="m", schema="s", identifier="m", sql=sql)
    auto.check_whole_input(request, _tree(sql), changed, [])


CHAINS = (
    "WITH RECURSIVE chain (root, id, depth) AS ("
    " SELECT id, id, 0 FROM src.t1 WHERE g = 'gold'"
    " UNION ALL SELECT chain.root, t.id, chain.depth + 1 FROM chain JOIN src.t1 t ON t.id = chain.id + 1"
    " WHERE chain.depth < 3)"
    " SELECT root, COUNT(*) AS n FROM chain GROUP BY root"
)


def test_a_recursion_whose_step_reads_every_changed_source_refreshes_in_full_under_auto():
    request = RefreshRequest(model="m", schema="s", identifier="m", sql=CHAINS)
    with pytest.raises(FullIsCheaper, match="recursive step reads the changed source src.t1"):
        auto.check_whole_input(request, _tree(CHAINS), {"src.t1"}, [])
    differential = RefreshRequest(model="m", schema="s", identifier="m", sql=CHAINS, refresh_mode="differential")
    auto.check_whole_input(differential, _tree(CHAINS), {"src.t1"}, [])
    fulls = [_e("differential", 9.0, 10)] + [_e("full", 2.0)] * auto.PROBE_AFTER_FULL
    auto.check_whole_input(request, _tree(CHAINS), {"src.t1"}, fulls)


@pytest.mark.parametrize(
    "sql, changed",
    [
        # only the base reads the changed source: the change is derived from the change alone
        (
            "WITH RECURSIVE chain (root, id, depth) AS ("
            " SELECT id, id, 0 FROM src.t2 WHERE g = 'gold'"
            " UNION ALL SELECT chain.root, t.id, chain.depth + 1 FROM chain JOIN src.t1 t ON t.id = chain.id + 1"
            " WHERE chain.depth < 3)"
            " SELECT root, COUNT(*) AS n FROM chain GROUP BY root",
            {"src.t2"},
        ),
        # a changed source read outside the recursion too: that part refreshes by its change
        (
            "WITH RECURSIVE chain (root, id, depth) AS ("
            " SELECT id, id, 0 FROM src.t1 WHERE g = 'gold'"
            " UNION ALL SELECT chain.root, t.id, chain.depth + 1 FROM chain JOIN src.t1 t ON t.id = chain.id + 1"
            " WHERE chain.depth < 3)"
            " SELECT c.root, b.v FROM chain c JOIN src.t2 b ON c.id = b.k",
            {"src.t1", "src.t2"},
        ),
    ],
)
def test_the_recursion_rule_leaves_refreshes_that_read_less(sql, changed):
    request = RefreshRequest(model="m", schema="s", identifier="m", sql=sql)
    auto.check_whole_input(request, _tree(sql), changed, [])


def _estimated(change_rows, ratio_pct=640):
    entry = costs.entry("full", 0, change_rows, "the differential refresh would read ...", {}, rule=auto.READ_COST)
    return {**entry, "seconds": 6.0, "read_ratio_pct": ratio_pct}


def test_a_full_refresh_sent_by_the_read_estimate_is_not_estimated_again_for_a_comparable_change():
    history = [_e("full", 6.0), _estimated(6_000)]
    reason = auto.estimate_reason(history, 5_900)
    assert reason is not None
    assert "the read estimate sent a refresh of 6,000 change rows to full (6.4x a rebuild's bytes)" in reason
    with pytest.raises(FullIsCheaper) as raised:
        auto.check_history(RefreshRequest("m", "s", "t", "select 1"), history, 5_900)
    assert raised.value.rule == auto.HISTORY
    # A much smaller change may read little enough: estimated again.
    assert auto.estimate_reason(history, 1_000) is None


def test_a_full_refresh_sent_by_the_intermediates_bar_names_that_bar_later():
    entry = costs.entry("full", 0, 6_000, "why", {}, rule=auto.READ_COST, read_ratio_pct=180, read_bar_pct=150)
    reason = auto.estimate_reason([_e("full", 6.0), {**entry, "seconds": 6.0}], 5_900)
    assert reason is not None and "(1.8x a rebuild's bytes; its bar 1.5x)" in reason


def test_commit_counts_read_either_writers_metrics_and_our_own_counts():
    from python_helpers.runtime.delta.metadata import commit_counts

    spark_merge = {"numTargetRowsInserted": "3", "numTargetRowsUpdated": "0", "numTargetRowsDeleted": "2"}
    spark_merge.update(numOutputRows="40", numTargetFilesAdded="1", numTargetFilesRemoved="1", numSourceRows="5")
    assert commit_counts(spark_merge) == {
        "rows_inserted": 3,
        "rows_updated": 0,
        "rows_deleted": 2,
        "rows_written": 40,
        "files_added": 1,
        "files_removed": 1,
    }
    # Spark's CREATE OR REPLACE of a full refresh; an append's metrics beside our own counts.
    assert commit_counts({"numOutputRows": "7", "numFiles": "2"}) == {"rows_written": 7, "files_added": 2}
    appended = commit_counts({"num_added_rows": 4, "num_added_files": 1}, {"rows_inserted": 4})
    assert appended == {"rows_written": 4, "files_added": 1, "rows_inserted": 4}
    assert commit_counts(None, None) == {} and commit_counts({"numOutputRows": None, "x": "y"}) == {}
    # Our own counts win over an append's metrics; metrics that are no mapping count for nothing.
    assert commit_counts({"num_added_rows": 4}, {"rows_written": 3}) == {"rows_written": 3}
    assert commit_counts("{}", None) == {}  # type: ignore[arg-type]


def test_a_learned_bar_and_the_ratio_that_reached_it_are_named_at_the_same_precision():
    entry = costs.entry("full", 0, 6_000, "why", {}, rule=auto.READ_COST, read_ratio_pct=187, read_bar_pct=187)
    reason = auto.estimate_reason([_e("full", 6.0), {**entry, "seconds": 6.0}], 5_900)
    assert reason is not None and "(1.87x a rebuild's bytes; its bar 1.87x)" in reason


def test_the_read_estimate_learns_nothing_across_a_differential_refresh_or_a_due_probe():
    assert auto.estimate_reason([_estimated(100), _e("differential", 2.0, 100)], 100) is None
    # ...of a similar change: a much smaller one since (another change mix) says nothing of it.
    assert auto.estimate_reason([_estimated(3_000), _e("differential", 2.0, 500)], 3_000) is not None
    assert auto.estimate_reason([_estimated(100)] * auto.PROBE_AFTER_FULL, 100) is None
    # Full refreshes for other reasons (a rebuild asked for, a first build) say nothing of reads.
    assert auto.estimate_reason([_e("full", 2.0), _e("full", 2.0)], 100) is None


def test_the_history_entry_records_the_rule_and_the_change_counted_before_a_fallback():
    entry = costs.entry("full", 0, 42, "why", {}, rule=auto.READ_COST, read_ratio_pct=310)
    assert entry["rule"] == "read_cost" and entry["read_ratio_pct"] == 310 and entry["change_rows"] == 42
    from python_helpers.runtime.history import refresh_rows

    (row,) = refresh_rows("s", "t", [{"mode": "full", "history": [{**entry, "read_bar_pct": 200}]}])
    assert (row["rule"], row["read_ratio_pct"], row["read_bar_pct"]) == ("read_cost", 310, 200)
    assert "rule" not in costs.entry("full", 0, None, "first build", {})


def _build(seconds):
    return {**_e("full", seconds), "reason": "first build"}


def test_refreshes_of_a_similar_change_are_compared_before_much_smaller_ones():
    # Small changes refresh fast, large ones slowly; a rebuild takes 2.4 s.
    history = [_build(3.4), _e("full", 2.4), _e("differential", 1.9, 2_500), _e("differential", 3.5, 15_000)]
    assert "of 15,000 or fewer change rows took 3.5 s" in auto.history_reason(history, 15_000)
    assert auto.history_reason(history, 2_500) is None
    # With no similar change measured, the smaller ones bound the cost from below.
    assert auto.history_reason([_build(3.4), _e("full", 2.4), _e("differential", 2.9, 100)], 15_000) is not None


def test_a_first_build_is_not_taken_for_a_rebuild_once_a_rebuild_was_measured():
    history = [_build(9.0), _e("full", 2.0), _e("differential", 3.0, 100)]
    assert "a full refresh 2.0 s" in auto.history_reason(history, 100)


def test_one_full_refresh_measures_a_rebuild_when_only_the_first_build_is_known():
    close = [_build(3.4), _e("differential", 3.5, 15_000), _e("differential", 3.3, 15_000)]
    reason = auto.history_reason(close, 15_000)
    assert reason is not None and "close to the first build's 3.4 s" in reason
    assert auto.history_reason(close[:2], 15_000) is None  # one measurement is not enough
    far = [_build(3.4), _e("differential", 1.9, 15_000), _e("differential", 2.0, 15_000)]
    assert auto.history_reason(far, 15_000) is None  # under 0.6x the build: nothing to measure
    assert auto.history_reason(close + [_e("full", 2.2)], 15_000) is not None  # measured: 3.4 > 1.1 x 2.2
    assert auto.history_reason(close + [_e("full", 3.3)], 15_000) is None


def test_the_delta_sql_is_judged_ahead_until_a_similar_change_ran_differentially():
    """auto.passed_before: ReadBudget.check_ahead renders the delta SQL again, so it runs only
    until the newest refresh of a similar change went through differentially."""
    request = RefreshRequest("m", "s", "t", "select 1")

    def passed(history, rows):
        return auto.passed_before(request, history, rows)

    assert not passed([], 1000)  # the first refresh after the build
    assert not passed([_e("full", 2.0)], 1000)
    assert passed([_e("full", 2.0), _e("differential", 1.0, 900)], 1000)
    # Only a similar change counts (a tenth of it says nothing), and the newest one decides.
    assert not passed([_e("differential", 1.0, 100)], 1000)
    assert not passed([_e("differential", 1.0, 1000), _e("full", 2.0, 1100)], 1000)
    assert passed([_e("full", 2.0, 1100), _e("differential", 1.0, 1000), _e("full", 2.0, 50)], 1000)
    # Without auto_from_history the history decides nothing, this included.
    off = RefreshRequest("m", "s", "t", "select 1", auto_from_history=False)
    assert not auto.passed_before(off, [_e("differential", 1.0, 1000)], 1000)


def _read(seconds, change_rows, ratio_pct):
    return {**_e("differential", seconds, change_rows), "read_ratio_pct": ratio_pct}


def test_the_read_bar_learns_from_a_differential_refresh_that_read_a_lot_and_was_slower():
    """auto.learned_read_bar: the lowest read estimate (at least a rebuild's bytes) of a
    differential refresh slower than 1.1x the full refreshes becomes the model's bar."""
    # TPC-H Q20 at SF 10 under scattered updates: two changes of the same size, both estimated at
    # 1.9x a rebuild's bytes; the first took 2.9 s, the second (its intermediates held rows) 9.2 s.
    history = [_build(18.5), _e("full", 6.0), _read(2.9, 2_010, 190), _read(9.2, 2_022, 190)]
    bar = auto.learned_read_bar(history)
    assert bar is not None and bar[0] == 1.9
    assert bar[1] == "a differential refresh of this model read 1.9x and took 9.2 s, a full refresh 6.0 s"
    # Not learned: from a refresh that read less than a rebuild (its time is not its reads), one
    # within 1.1x, one over the 2x prior, one of unknown length, or without a full refresh timed.
    assert auto.learned_read_bar([_e("full", 3.9), _read(6.4, 2_000, 90)]) is None
    assert auto.learned_read_bar([_e("full", 3.9), _read(4.2, 2_000, 150)]) is None
    assert auto.learned_read_bar([_e("full", 3.9), _read(9.0, 2_000, 250)]) is None
    assert auto.learned_read_bar([_e("full", 3.9), _read(None, 2_000, 150)]) is None
    assert auto.learned_read_bar([_read(6.4, 2_000, 150)]) is None
    # The lowest such estimate decides.
    assert auto.learned_read_bar([_e("full", 2.0), _read(6.0, 10, 180), _read(5.0, 10, 120)])[0] == 1.2
    # It does not veto the differential refresh probed after 10 full ones in a row.
    assert auto.learned_read_bar(history + [_e("full", 6.0)] * auto.PROBE_AFTER_FULL) is None
    # The estimate it learned from trips it again: compared in whole percent, as the history keeps it.
    from python_helpers.runtime.refresh.read_cost import ReadEstimate

    assert ReadEstimate(1896, 1000, 2).learned_reason(1.9, "measured", min_full_bytes=0) is not None
    assert ReadEstimate(1894, 1000, 2).learned_reason(1.9, "measured", min_full_bytes=0) is None
    # Every reason prints the ratio in whole percent, as it is compared and kept: the firing one as
    # the later ones, and a half percent as the comparison rounds it (1.075 fires a 1.08 bar: 1.08x).
    assert "1.08x the" in ReadEstimate(1075, 1000, 2).learned_reason(1.08, "measured", min_full_bytes=0)
    assert read_cost.ratio_text(1.875) == "1.88x" and read_cost.ratio_text(2.0) == "2x"
    # The 2x prior too: 2.004x is 200% and does not trip it.
    assert ReadEstimate(2004, 1000, 2).full_reason(2.0, min_full_bytes=0) is None
    assert "2.01x the" in ReadEstimate(2006, 1000, 2).full_reason(2.0, min_full_bytes=0)
    assert "1.87x the" in ReadEstimate(1872, 1000, 2).learned_reason(1.87, "measured", min_full_bytes=0)
    assert "read 1.87x and took" in auto.learned_read_bar([_e("full", 2.0), _read(6.0, 10, 187)])[1]


def test_the_read_budget_goes_full_at_the_learned_bar_under_auto_from_history_only():
    from sqlglot import parse_one

    mb = 1024 * 1024

    class Bindings:
        def read_bytes(self):
            return {"v_new": 90 * mb, "v_old": 90 * mb}

        def full_read_bytes(self):
            return 100 * mb

    history = [_e("full", 3.9), _read(6.4, 2_000, 160)]
    query = parse_one("SELECT * FROM v_new JOIN v_old USING (k)")  # 180 MB: 1.8x, under the 2x prior
    counters: dict = {}
    learned = read_budget.ReadBudget(RefreshRequest("m", "s", "t", "select 1"), Bindings(), counters, 0, history)
    with pytest.raises(FullIsCheaper, match=r"1\.8x the 100\.0 MB .*read 1\.6x and took 6\.4 s, a full refresh 3\.9 s"):
        learned.check(query)
    assert counters["read_ratio_pct"] == 180
    # Below what the slow refresh read it goes on; without auto_from_history the prior alone judges.
    assert learned.check(parse_one("SELECT * FROM v_new")) is not None
    off = RefreshRequest("m", "s", "t", "select 1", auto_from_history=False)
    assert read_budget.ReadBudget(off, Bindings(), {}, 0, history).check(query) is not None
    # A differential refresh's history entry keeps its estimate, to learn from.
    assert costs.entry("differential", 0, 10, None, {}, read_ratio_pct=180)["read_ratio_pct"] == 180
