"""The read estimate that lets `auto` prefer a rebuild over a differential refresh that would
read several times what the rebuild reads (python_helpers/runtime/refresh/read_cost.py)."""

import re

import pyarrow as pa
from sqlglot import exp, parse_one

from python_helpers.runtime.delta.embedded import tables as delta_tables
from python_helpers.runtime.refresh import read_cost


def test_each_reference_of_a_view_counts():
    query = parse_one(
        "SELECT * FROM v_new a JOIN v_new b ON a.k = b.k JOIN chg c ON c.k = a.k UNION ALL SELECT * FROM v_old"
    )
    est = read_cost.estimate(query, {"v_new": 100, "v_old": 80}, full_bytes=100)
    assert (est.differential_bytes, est.references) == (280, 3)
    assert est.ratio == 2.8
    reason = est.full_reason(threshold=2.5, min_full_bytes=0)
    assert reason is not None and "3 reads" in reason and "2.8x" in reason


def test_an_identical_grouped_derived_table_is_read_once():
    # A consolidated delta named twice (the MERGE rows and the row ids they look up): one shuffle.
    grouped = "(SELECT k, SUM(w) AS w FROM chg JOIN v_new n ON n.k = chg.k GROUP BY k)"
    query = parse_one(f"SELECT * FROM {grouped} AS a JOIN (SELECT k FROM {grouped} AS b) AS c ON a.k = c.k")
    est = read_cost.estimate(query, {"v_new": 100}, full_bytes=100)
    assert (est.differential_bytes, est.references) == (100, 1)
    # Not grouped: Spark reads the view again.
    plain = parse_one("SELECT * FROM (SELECT k FROM v_new) a JOIN (SELECT k FROM v_new) b ON a.k = b.k")
    assert read_cost.estimate(plain, {"v_new": 100}, full_bytes=100).references == 2


def test_a_read_joined_to_an_empty_materialized_relation_is_not_counted():
    # A group rescan when no group is flagged: the flagged keys served as `... WHERE FALSE`.
    empty = "(SELECT * FROM m WHERE FALSE)"
    rescan = f"SELECT k, MAX(v) FROM (SELECT * FROM v_new) AS ra LEFT SEMI JOIN {empty} AS ka ON ra.k = ka.k GROUP BY k"
    query = parse_one(f"SELECT * FROM chg AS d LEFT JOIN ({rescan}) AS r ON d.k = r.k")
    assert read_cost.estimate(query, {"v_new": 100, "chg": 1}, full_bytes=100).differential_bytes == 1
    inner = parse_one(f"SELECT * FROM v_new AS a JOIN {empty} AS b ON a.k = b.k")
    assert read_cost.estimate(inner, {"v_new": 100}, full_bytes=100).differential_bytes == 0
    from_empty = parse_one(f"SELECT * FROM {empty} AS a LEFT JOIN v_new AS b ON a.k = b.k")
    assert read_cost.estimate(from_empty, {"v_new": 100}, full_bytes=100).differential_bytes == 0
    # An outer or anti join keeps its preserved side; a non-empty relation prunes nothing.
    for sql in (
        f"SELECT * FROM v_new AS a LEFT JOIN {empty} AS b ON a.k = b.k",
        f"SELECT * FROM v_new AS a LEFT ANTI JOIN {empty} AS b ON a.k = b.k",
        "SELECT * FROM v_new AS a LEFT SEMI JOIN (SELECT * FROM m WHERE k > 0) AS b ON a.k = b.k",
        # a global aggregate under WHERE FALSE holds one row
        "SELECT * FROM v_new AS a JOIN (SELECT COUNT(*) AS n FROM m WHERE FALSE) AS b ON a.k = b.n",
    ):
        assert read_cost.estimate(parse_one(sql), {"v_new": 100}, full_bytes=100).differential_bytes == 100, sql


def test_a_cte_is_read_at_each_use():
    query = parse_one("WITH c AS (SELECT * FROM v_new WHERE k > 1) SELECT * FROM c JOIN c AS d ON c.k = d.k")
    est = read_cost.estimate(query, {"V_NEW": 10}, full_bytes=10)
    assert (est.differential_bytes, est.references) == (20, 2)


def test_a_recursive_cte_referencing_itself_terminates():
    query = parse_one(
        "WITH RECURSIVE r AS (SELECT k FROM base UNION ALL SELECT e.k FROM r JOIN edges e ON r.k = e.p) SELECT * FROM r"
    )
    est = read_cost.estimate(query, {"base": 5, "edges": 50}, full_bytes=55)
    assert (est.differential_bytes, est.references) == (55, 2)
    assert est.full_reason(min_full_bytes=0) is None


def test_qualified_tables_and_unknown_names_are_not_counted():
    query = exp.select("*").from_(exp.Table(this=exp.to_identifier("v"), db=exp.to_identifier("parquet")))
    assert read_cost.estimate(query, {"v": 7}, full_bytes=7).differential_bytes == 0
    assert read_cost.estimate(parse_one("SELECT * FROM other"), {"v": 7}, 7).references == 0


def test_no_full_bytes_means_no_verdict():
    est = read_cost.estimate(parse_one("SELECT * FROM v"), {"v": 7}, full_bytes=0)
    assert est.full_reason() is None


def test_bytes_of_files_follows_the_file_list_order():
    actions = pa.table({"path": ["a", "b", "c"], "size_bytes": [10, 20, 40]})
    files = ["/t/a", "/t/b", "/t/c"]
    assert delta_tables.bytes_of_files(actions, files) == 70
    assert delta_tables.bytes_of_files(actions, files, ["/t/c", "/t/a"]) == 50
    assert delta_tables.bytes_of_files(pa.table({"path": ["a"]}), ["/t/a"]) == 0


def test_small_sources_are_not_judged():
    est = read_cost.estimate(parse_one("SELECT * FROM v JOIN v AS w JOIN v AS x JOIN v AS y"), {"v": 10}, 10)
    assert est.ratio == 4.0
    assert est.full_reason(threshold=3.0, min_full_bytes=11) is None
    assert "4x the" in est.full_reason(threshold=3.0, min_full_bytes=10)


class _Bindings:
    """What the budget asks of an engine's bindings: the bytes each bound view covers and a
    rebuild's reads."""

    def __init__(self, views: dict, full: int):
        self.views, self.full, self.full_asked = views, full, 0

    def read_bytes(self):
        return dict(self.views)

    def full_read_bytes(self):
        self.full_asked += 1
        return self.full


def test_an_intermediate_computed_first_is_judged_before_it_runs_and_counted_after():
    import pytest

    from python_helpers.runtime.refresh import auto, read_budget
    from python_helpers.runtime.refresh.requests import RefreshRequest

    mb = 1024 * 1024
    bindings = _Bindings({"v_new": 60 * mb, "v_old": 60 * mb, "store": 30 * mb}, full=100 * mb)
    counters: dict = {}
    budget = read_budget.ReadBudget(RefreshRequest("m", "s", "t", "select 1"), bindings, counters)
    ran = []
    materialize = budget.guard(lambda q: ran.append(q) or exp.select("*").from_("m0"))
    # A delta over one snapshot (60 MB, 0.6x a rebuild) is computed first: allowed, and paid.
    served = materialize(parse_one("SELECT k, SUM(w) FROM v_new GROUP BY k"))
    assert len(ran) == 1
    # The final query reads the materialized delta, the stored result and the old snapshot, and
    # the budget holds all of it: 150 MB, 1.5x; under the final query's 2x.
    final = parse_one(f"SELECT * FROM ({served.sql()}) d JOIN store s ON s.k = d.k JOIN v_old o ON o.k = d.k")
    estimate = budget.check(final)
    assert estimate is not None and (estimate.differential_bytes, estimate.references) == (150 * mb, 3)
    assert counters["read_ratio_pct"] == 150
    # What is computed before the final query may read at most 1.5x a rebuild's bytes: a second
    # intermediate reading both snapshots (180 MB with the first, 1.8x) is refused before it runs.
    with pytest.raises(auto.FullIsCheaper, match=r"computes first would read .*\(3 reads\), 1\.8x.*over 1\.5x"):
        materialize(parse_one("SELECT * FROM v_new JOIN v_old USING (k)"))
    assert len(ran) == 1
    # Under refresh_mode='differential' nothing is refused; the rebuild's bytes are read once.
    forced = read_budget.ReadBudget(
        RefreshRequest("m", "s", "t", "select 1", refresh_mode="differential"), bindings, {}
    )
    over = parse_one("SELECT * FROM v_new JOIN v_old USING (k) JOIN v_new n2 USING (k) JOIN v_old o2 USING (k)")
    assert forced.guard(lambda q: q)(over) is over  # 240 MB, 2.4x: run all the same
    assert bindings.full_asked == 2
    # ...and no bar is recorded as if it had sent the refresh to full.
    assert "read_bar_pct" not in forced.counters and counters["read_bar_pct"] == 150


def test_the_whole_delta_sql_is_judged_before_any_intermediate_is_computed_where_they_cannot_matter():
    """ReadBudget.check_ahead renders the delta SQL with its intermediates left in place and
    taken as empty: the least the refresh can read. Over 2x a rebuild even so, the refresh goes
    full before the first intermediate runs (guard alone would have paid it, then refused);
    where the intermediates' rows decide, they are computed and judged as they come."""
    import pytest

    from python_helpers.dvm.sqlgen import Context
    from python_helpers.runtime.refresh import auto, read_budget
    from python_helpers.runtime.refresh.requests import RefreshRequest

    mb = 1024 * 1024
    bindings = _Bindings({"v_new": 60 * mb, "v_old": 60 * mb, "store": 30 * mb}, full=100 * mb)
    ran: list = []
    rows_for_keys_asked: list = []

    def context():
        return Context(
            changes=lambda r: exp.to_table("chg"),
            snapshot=lambda r, v: exp.to_table(f"v_{v}"),
            materialize=lambda q: ran.append(q) or exp.select("*").from_("m0"),
            rows_for_keys=lambda *a: rows_for_keys_asked.append(a),
        )

    def delta_sql(final: str):
        def render(ctx: Context):
            # As a delta rule does: an intermediate (both snapshots: 120 MB) computed first,
            # then a final query over it (`d`).
            served = ctx.materialize(parse_one("SELECT k, SUM(w) FROM v_new JOIN v_old USING (k) GROUP BY k"))
            # A source read for the change's keys in the dbt process: a stand-in that reads
            # nothing and counts nothing (the refresh's own read would count a few files).
            assert ctx.rows_for_keys is not None
            keyed = ctx.rows_for_keys("src.t", "new", [("k", "__dvm_key0")], parse_one("SELECT k FROM chg"))
            assert rows_for_keys_asked == []
            return parse_one(final.replace("{d}", f"({served.sql()})").replace("{k}", keyed.sql()))

        return render

    def budget(mode: str = "auto", counters: dict | None = None):
        request = RefreshRequest("m", "s", "t", "select 1", refresh_mode=mode)
        return read_budget.ReadBudget(request, bindings, {} if counters is None else counters)

    # Besides what meets the intermediate, the final query reads both snapshots whatever it
    # holds: 120 + 120 MB at least, 2.4x a rebuild. Refused, and nothing was computed.
    regardless = (
        "SELECT * FROM {d} d JOIN store s ON s.k = d.k UNION ALL SELECT * FROM v_new a JOIN v_old b USING (k)"
        " UNION ALL SELECT * FROM {k}"
    )
    counters: dict = {}
    with pytest.raises(auto.FullIsCheaper, match=r"\(4 reads\), 2\.4x.*before its intermediates were computed"):
        budget(counters=counters).check_ahead(context(), delta_sql(regardless))
    assert ran == [] and rows_for_keys_asked == [] and counters["read_ratio_pct"] == 240
    # Reads that all meet the intermediate: 270 MB if it holds rows, 120 MB if not. Its rows
    # decide, so it is left to be computed (and judged by `guard` as it comes).
    meeting = "SELECT * FROM {d} d JOIN v_new a ON a.k = d.k JOIN v_old b ON b.k = d.k JOIN store s ON s.k = d.k"
    budget().check_ahead(context(), delta_sql(meeting))
    assert ran == []
    # Under refresh_mode='differential' nothing is judged; nor without intermediates (check()
    # on the final query costs nothing then).
    budget("differential").check_ahead(context(), delta_sql(regardless))
    no_intermediate = parse_one(
        "SELECT * FROM v_new JOIN v_old USING (k) JOIN v_new n USING (k) JOIN v_old o USING (k)"
    )
    budget().check_ahead(context(), lambda ctx: no_intermediate)
    # A delta SQL that fails to render is left to the refresh, which reports it.
    budget().check_ahead(context(), lambda ctx: 1 / 0)


def test_the_least_reads_are_judged_again_once_an_intermediate_holds_rows():
    """After check_ahead let the refresh go on, each further intermediate is preceded by the same
    judgement with the computed ones in place: the final query's reads that meet the first
    intermediate are only known once it holds rows. Over the bar then, the refresh goes full
    before paying the second; where the total stays under, every intermediate runs."""
    import pytest

    from python_helpers.dvm.sqlgen import Context
    from python_helpers.runtime.refresh import auto, read_budget
    from python_helpers.runtime.refresh.requests import RefreshRequest

    mb = 1024 * 1024
    bindings = _Bindings({"v_new": 60 * mb, "v_old": 60 * mb, "store": 30 * mb}, full=100 * mb)

    def delta_sql(final_meets_first: bool):
        def render(ctx: Context):
            # The first intermediate reads the new snapshot (60 MB); the second only the change.
            first = ctx.materialize(parse_one("SELECT k, SUM(w) AS w FROM v_new GROUP BY k"))
            second = ctx.materialize(parse_one("SELECT k FROM chg"))
            final = f"SELECT * FROM ({second.sql()}) d2 JOIN store s ON s.k = d2.k"
            if final_meets_first:  # both snapshots and the stored result, for the first one's keys
                final += (
                    f" UNION ALL SELECT * FROM ({first.sql()}) d JOIN v_new a ON a.k = d.k JOIN v_old b ON b.k = d.k"
                    " JOIN store t ON t.k = d.k"
                )
            return parse_one(final)

        return render

    def refresh(final_meets_first: bool):
        ran: list = []
        counters: dict = {}
        budget = read_budget.ReadBudget(RefreshRequest("m", "s", "t", "select 1"), bindings, counters)
        ctx = Context(
            changes=lambda r: exp.to_table("chg"),
            snapshot=lambda r, v: exp.to_table(f"v_{v}"),
            materialize=lambda q: ran.append(q) or exp.select("*").from_(f"m{len(ran) - 1}"),
        )
        render = delta_sql(final_meets_first)
        # Ahead, both intermediates empty: 60 MB, 0.6x; the refresh goes on.
        budget.check_ahead(ctx, render)
        assert ran == []
        ctx.materialize = budget.guard(ctx.materialize)
        return ran, counters, lambda: budget.check(render(ctx))

    ran, counters, finish = refresh(final_meets_first=True)
    # The first intermediate holds rows: the final query then reads both snapshots and the
    # stored result for its keys, 60 MB spent and 150 MB to come, 2.1x. The second is not computed.
    with pytest.raises(auto.FullIsCheaper, match=r"2\.1x.*judged after 1 of its intermediates was computed"):
        finish()
    assert len(ran) == 1 and counters["read_ratio_pct"] == 210
    # Without those reads the total stays at 0.9x (the stored result's 30 MB): both run.
    ran, counters, finish = refresh(final_meets_first=False)
    estimate = finish()
    assert len(ran) == 2 and estimate is not None and counters["read_ratio_pct"] == 90


def test_the_least_reads_are_not_judged_again_where_nothing_new_is_known():
    """No second judgement after an intermediate found empty (it is what the first judgement
    took it to be), after a rendering that failed, or past AHEAD_AGAIN_LIMIT intermediates."""
    from python_helpers.dvm.sqlgen import Context
    from python_helpers.runtime.refresh import read_budget
    from python_helpers.runtime.refresh.requests import RefreshRequest

    mb = 1024 * 1024
    bindings = _Bindings({"v_new": 60 * mb, "v_old": 60 * mb}, full=100 * mb)

    def refresh(intermediates: int, empty: bool = False, fails: bool = False) -> int:
        renders = [0]

        def render(ctx: Context):
            renders[0] += 1
            if fails and renders[0] == 1:
                raise ValueError("does not render")
            served = [ctx.materialize(parse_one(f"SELECT k FROM chg WHERE k > {i}")) for i in range(intermediates)]
            return parse_one(" UNION ALL ".join(f"SELECT * FROM ({s.sql()}) d{i}" for i, s in enumerate(served)))

        def materialize(query):
            served = exp.select("*").from_("m")
            return served.where(exp.false()) if empty else served

        budget = read_budget.ReadBudget(RefreshRequest("m", "s", "t", "select 1"), bindings, {})
        ctx = Context(changes=lambda r: exp.to_table("chg"), snapshot=lambda r, v: exp.to_table(f"v_{v}"))
        ctx.materialize = materialize
        budget.check_ahead(ctx, render)
        ctx.materialize = budget.guard(materialize)
        render(ctx)
        return renders[0] - 1  # the refresh's own rendering

    assert refresh(3) == 1 + 2  # ahead, then before the second and the third
    assert refresh(3, empty=True) == 1
    assert refresh(3, fails=True) == 1  # the failed one only
    limit = read_budget.AHEAD_AGAIN_LIMIT
    assert refresh(limit + 3) == 1 + limit


# TPC-H's columns that Q20 reads, for planning it without Spark.
_Q20_SCHEMAS = {
    "tpch.supplier": {"s_suppkey": "bigint", "s_name": "string", "s_address": "string", "s_nationkey": "bigint"},
    "tpch.nation": {"n_nationkey": "bigint", "n_name": "string"},
    "tpch.partsupp": {"ps_partkey": "bigint", "ps_suppkey": "bigint", "ps_availqty": "int"},
    "tpch.part": {"p_partkey": "bigint", "p_name": "string"},
    "tpch.lineitem": {
        "l_partkey": "bigint",
        "l_suppkey": "bigint",
        "l_quantity": "decimal(15,2)",
        "l_shipdate": "date",
    },
}


def test_q20s_intermediate_is_refused_before_it_runs_where_it_reads_more_than_the_intermediates_bar():
    """TPC-H Q20 with only lineitem changed: the keys whose `IN` membership changed are computed
    first, and they recompute the correlated SUM per (partkey, suppkey) at both versions, so
    that one intermediate reads lineitem twice. What is computed before the final query may
    read at most FIRST_READ_RATIO_OVER a rebuild's bytes: over it, the refresh goes full before
    anything runs, where the final query's 2x let it pay the intermediate (1.9x a rebuild's
    time at SF 1 and SF 10)."""
    import pytest

    from python_helpers.dvm.differentiate import delta
    from python_helpers.dvm.plan_query import query_tree
    from python_helpers.dvm.sqlgen import Context, render
    from python_helpers.runtime.refresh import auto, read_budget
    from python_helpers.runtime.refresh.requests import RefreshRequest
    from python_helpers.sql.parse import parse_query
    from python_helpers.testing.tpch_queries import QUERIES

    tree, _ = query_tree("q20", parse_query("q20", QUERIES["q20"].format(src="tpch")), _Q20_SCHEMAS)
    mb = 1024 * 1024

    def refresh(lineitem_mb: int) -> list:
        computed: list = []
        sizes = {"new_lineitem": lineitem_mb * mb, "old_lineitem": lineitem_mb * mb, "new_part": 5 * mb}
        sizes.update(new_partsupp=10 * mb, new_supplier=mb, new_nation=mb)
        budget = read_budget.ReadBudget(RefreshRequest("q20", "s", "t", "select 1"), _Bindings(sizes, 100 * mb), {})
        ctx = Context(
            changes=lambda r: exp.to_table(f"chg_{r.split('.')[1]}"),
            snapshot=lambda r, v: exp.to_table(f"{v}_{r.split('.')[1]}"),
            changed={"tpch.lineitem"},
            small_delta=True,
            materialize=lambda q: computed.append(render(q)) or exp.select("*").from_(f"mat_{len(computed)}"),
        )
        budget.check_ahead(ctx, lambda c: delta(tree, c))
        ctx.materialize = budget.guard(ctx.materialize)
        delta(tree, ctx)  # the final query is judged by the refresh, at 2x
        return computed

    # Lineitem at both versions, 140 MB, its change and the parts and suppliers it meets: 1.75x.
    with pytest.raises(auto.FullIsCheaper, match=r"computes first would read .* 1\.75x .*over 1\.5x.*judged before"):
        refresh(lineitem_mb=70)
    # A smaller lineitem (1.1x): the intermediate is computed, lineitem read at both versions.
    (keys,) = refresh(lineitem_mb=40)
    assert {"new_lineitem", "old_lineitem", "chg_lineitem"} <= set(re.findall(r"\b(?:new|old|chg)_\w+", keys))
    assert keys.startswith("SELECT __dvm_in")


def test_the_intermediates_bar_is_judged_ahead_too():
    """What is computed before the final query, taken together before any of it runs, meets
    FIRST_READ_RATIO_OVER there too: guard would refuse the last of them only after paying the
    ones before."""
    import pytest

    from python_helpers.dvm.sqlgen import Context
    from python_helpers.runtime.refresh import auto, read_budget
    from python_helpers.runtime.refresh.requests import RefreshRequest

    mb = 1024 * 1024
    bindings = _Bindings({"v_new": 60 * mb, "v_old": 60 * mb}, full=100 * mb)

    def render(ctx: Context):
        first = ctx.materialize(parse_one("SELECT k, SUM(w) AS w FROM v_new GROUP BY k"))
        second = ctx.materialize(parse_one("SELECT k FROM v_new JOIN v_old USING (k)"))
        return parse_one(f"SELECT * FROM ({first.sql()}) a JOIN ({second.sql()}) b ON a.k = b.k")

    ran: list = []
    counters: dict = {}
    budget = read_budget.ReadBudget(RefreshRequest("m", "s", "t", "select 1"), bindings, counters)
    ctx = Context(
        changes=lambda r: exp.to_table("chg"),
        snapshot=lambda r, v: exp.to_table(f"v_{v}"),
        materialize=lambda q: ran.append(q) or exp.select("*").from_(f"m{len(ran) - 1}"),
    )
    # 180 MB computed first (1.8x), the final query nothing more: under 2x, over 1.5x.
    with pytest.raises(auto.FullIsCheaper, match=r"computes first .*1\.8x.*judged before its intermediates"):
        budget.check_ahead(ctx, render)
    assert ran == []
    # The bar beside the ratio, for the history: a later refresh's reason names both.
    assert (counters["read_ratio_pct"], counters["read_bar_pct"]) == (180, 150)


def test_the_check_ahead_asks_for_no_keyed_read_where_the_least_without_them_is_over_the_bar():
    """A keyed read costs the engine its change's key list and range (a Spark job each over a
    change Spark reads). The check ahead first stands every keyed read in as reading nothing:
    over the bar even so, the refresh goes full without asking for one."""
    import pytest

    from python_helpers.dvm.sqlgen import Context
    from python_helpers.runtime.refresh import auto, read_budget
    from python_helpers.runtime.refresh.requests import RefreshRequest

    mb = 1024 * 1024
    asked: list = []

    def refresh(intermediate: str) -> None:
        def render(ctx: Context):
            keyed = ctx.keyed_snapshot("s.part", "new", "p_partkey", "s.lineitem", "l_partkey")
            first = ctx.materialize(parse_one(intermediate))
            return parse_one(f"SELECT * FROM ({first.sql()}) a JOIN {keyed.sql()} p ON a.k = p.k")

        bindings = _Bindings({"v_new": 60 * mb, "v_old": 60 * mb, "v_part": 30 * mb}, full=100 * mb)
        budget = read_budget.ReadBudget(RefreshRequest("m", "s", "t", "select 1"), bindings, {})
        ctx = Context(
            changes=lambda r: exp.to_table("chg"),
            snapshot=lambda r, v: exp.to_table(f"v_{v}"),
            materialize=lambda q: exp.select("*").from_("m0"),
            keyed_snapshot=lambda *args, **kwargs: asked.append(args) or exp.to_table("v_part"),
        )
        budget.check_ahead(ctx, render)

    # Both snapshots twice (2.4x of intermediates): full with no keyed read asked for.
    with pytest.raises(auto.FullIsCheaper, match=r"2\.4x .*judged before"):
        refresh("SELECT * FROM v_new JOIN v_old USING (k) UNION ALL SELECT * FROM v_new JOIN v_old USING (k)")
    assert asked == []
    # One snapshot (0.6x, and 0.9x with the keyed read): the keyed read is asked for, once per
    # rendering of the real pass, and the refresh goes on.
    refresh("SELECT * FROM v_new")
    assert len(asked) == 1


def test_the_final_querys_own_rows_computed_ahead_are_judged_as_the_final_query():
    """The MERGE rows' delta computed once ahead of the final query (stored_reads.delta_once)
    holds most of a refresh's reads; it meets the final query's 2x, not the 1.5x of what is
    computed before it."""
    import pytest

    from python_helpers.dvm.sqlgen import part_of_final
    from python_helpers.runtime.refresh import auto, read_budget
    from python_helpers.runtime.refresh.requests import RefreshRequest

    mb = 1024 * 1024
    bindings = _Bindings({"v_new": 90 * mb, "v_old": 90 * mb}, full=100 * mb)
    both = "SELECT k, SUM(w) AS w FROM v_new JOIN v_old USING (k) GROUP BY k"  # 1.8x
    budget = read_budget.ReadBudget(RefreshRequest("m", "s", "t", "select 1"), bindings, {})
    assert budget.guard(lambda q: q)(part_of_final(parse_one(both))) is not None
    budget = read_budget.ReadBudget(RefreshRequest("m", "s", "t", "select 1"), bindings, {})
    with pytest.raises(auto.FullIsCheaper, match=r"computes first would read .* 1\.8x"):
        budget.guard(lambda q: q)(parse_one(both))
