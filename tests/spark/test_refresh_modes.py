"""Refresh modes and bookkeeping: full mode, no-op refreshes, forced rebuilds, reported versions."""

from __future__ import annotations

import pytest

from tests.support import sources as S
from tests.support.shapes import INITIAL, SHAPES_BY_NAME, SMOKE_BATCHES

pytestmark = pytest.mark.spark

AGG = SHAPES_BY_NAME["agg_algebraic"].sql
JOIN = SHAPES_BY_NAME["join2"].sql


def _rows(spark, view):
    return sorted((tuple(r) for r in spark.table(view).collect()), key=repr)


@pytest.mark.parametrize("shape", ["agg_minmax", "join2", "union_distinct"])
def test_full_mode_always_refreshes_in_full_and_matches(env, shape):
    sql = SHAPES_BY_NAME[shape].sql
    for t in ("t1", "t2"):
        env.source(t, INITIAL[t])
    stream = env.stream("full_" + shape, sql, refresh_mode="full")
    stream.refresh(expect="full")
    stream.check()
    for batch in SMOKE_BATCHES[:3]:
        env.apply(batch, only_existing=True)
        result = stream.refresh(expect="full")
        assert result.reason, "a full refresh says why it ran in full"
        stream.check()
    # Nothing changed: full mode still recomputes (it never reads changes).
    assert stream.refresh(expect="full").skipped is False
    stream.check()


@pytest.mark.parametrize("shape", ["agg_algebraic", "join2", "distinct", "filter_project"])
def test_refresh_without_source_change_is_a_skipped_differential(env, shape):
    sql = SHAPES_BY_NAME[shape].sql
    for t in ("t1", "t2"):
        env.source(t, INITIAL[t])
    stream = env.stream("noop_" + shape, sql)
    built = stream.refresh(expect="full")
    assert built.skipped is False and built.rows_changed > 0
    before = _rows(env.spark, stream.view)
    for _ in range(2):
        again = stream.refresh(expect="differential")
        assert again.skipped is True
        assert again.rows_changed == 0
        assert again.reason is None
        assert _rows(env.spark, stream.view) == before
        stream.check()
    # After a real change it does work again, then skips again.
    env.apply(SMOKE_BATCHES[0], only_existing=True)
    changed = stream.refresh(expect="differential")
    assert changed.skipped is False
    stream.check()
    assert stream.refresh(expect="differential").skipped is True


def test_change_to_a_table_the_query_does_not_read_is_skipped(env):
    env.source("t1", INITIAL["t1"])
    env.source("t2", INITIAL["t2"])
    stream = env.stream("only_t1", AGG)
    stream.refresh(expect="full")
    env.apply([S.Insert("t2", [S.row(None, 1, "a", 1)]), S.DeleteAll("t2")])
    result = stream.refresh(expect="differential")
    assert result.skipped is True and result.rows_changed == 0
    stream.check()


def test_update_of_columns_the_query_does_not_read_changes_no_rows(env):
    env.source("t1", INITIAL["t1"])
    stream = env.stream("unread_cols", "SELECT k, COUNT(*) AS n, SUM(v) AS sv FROM {src}.t1 GROUP BY k")
    stream.refresh(expect="full")
    before = _rows(env.spark, stream.view)
    env.apply([S.UpdateRows("t1", [0, 1, 2], {"x": 42.0, "dt": None, "g": "zz"})])
    result = stream.refresh(expect="differential")
    assert result.rows_changed == 0, result
    assert _rows(env.spark, stream.view) == before
    stream.check()


def test_rows_changed_counts_result_rows(env):
    env.source("t1", [S.row(1, 1, "a", 1), S.row(2, 2, "b", 2)])
    stream = env.stream("counted", "SELECT id, k, v FROM {src}.t1 WHERE v > 0")
    assert stream.refresh(expect="full").rows_changed == 2
    env.apply([S.Insert("t1", [S.row(None, 3, "c", 3), S.row(None, 4, "c", -1)])])
    assert stream.refresh(expect="differential").rows_changed == 1  # the v=-1 row is filtered out
    env.apply([S.DeleteRows("t1", [0])])
    assert stream.refresh(expect="differential").rows_changed == 1
    # Insert then delete the same row between two refreshes: it cancels.
    env.apply([S.Insert("t1", [S.row(99, 9, "z", 9)]), S.DeleteWhere("t1", "k", 9)])
    assert stream.refresh(expect="differential").rows_changed == 0
    stream.check()


def test_source_versions_are_the_versions_refreshed_to(env):
    p1 = env.source("t1", INITIAL["t1"])
    p2 = env.source("t2", INITIAL["t2"])
    stream = env.stream("versions", JOIN)
    built = stream.refresh(expect="full")
    assert _versions(built) == {f"{env.src}.t1": S.table_version(p1), f"{env.src}.t2": S.table_version(p2)}
    env.apply(SMOKE_BATCHES[0], only_existing=True)  # several commits on both tables
    result = stream.refresh(expect="differential")
    assert _versions(result) == {f"{env.src}.t1": S.table_version(p1), f"{env.src}.t2": S.table_version(p2)}
    stream.check()


def _versions(result):
    return {name.lower(): int(v) for name, v in result.source_versions.items()}


def test_full_refresh_flag_rebuilds_then_differential_resumes(env):
    env.source("t1", INITIAL["t1"])
    stream = env.stream("forced", AGG)
    stream.refresh(expect="full")
    env.apply(SMOKE_BATCHES[0], only_existing=True)
    forced = stream.refresh(expect="full", full_refresh=True)
    assert forced.reason and "full" in forced.reason.lower()
    stream.check()
    env.apply(SMOKE_BATCHES[1], only_existing=True)
    stream.refresh(expect="differential")
    stream.check()


def test_switching_from_full_mode_to_auto_continues_differentially(env):
    env.source("t1", INITIAL["t1"])
    stream = env.stream("switch", AGG, refresh_mode="full")
    stream.refresh(expect="full")
    env.apply(SMOKE_BATCHES[0], only_existing=True)
    stream.refresh(expect="full")
    stream.request_kw["refresh_mode"] = "auto"
    env.apply(SMOKE_BATCHES[1], only_existing=True)
    result = stream.refresh()
    stream.check()
    env.apply(SMOKE_BATCHES[2], only_existing=True)
    stream.refresh(expect="differential")
    stream.check()
    assert result.mode in ("full", "differential")


def test_differential_mode_refreshes_differentially(env):
    env.source("t1", INITIAL["t1"])
    env.source("t2", INITIAL["t2"])
    stream = env.stream("diff_mode", JOIN, refresh_mode="differential")
    stream.refresh(expect="full")
    stream.check()
    for batch in SMOKE_BATCHES[:2]:
        env.apply(batch, only_existing=True)
        stream.refresh(expect="differential")
        stream.check()


def test_two_stream_tables_on_one_source_are_independent(env):
    env.source("t1", INITIAL["t1"])
    a = env.stream("indep_a", AGG)
    b = env.stream("indep_b", SHAPES_BY_NAME["distinct"].sql)
    a.refresh(expect="full")
    b.refresh(expect="full")
    env.apply(SMOKE_BATCHES[0], only_existing=True)
    a.refresh(expect="differential")  # b is not refreshed now
    a.check()
    env.apply(SMOKE_BATCHES[1], only_existing=True)
    b.refresh(expect="differential")  # b consumes both batches at once
    b.check()
    a.refresh(expect="differential")
    a.check()


def test_stream_table_view_is_queryable_by_name(env):
    env.source("t1", INITIAL["t1"])
    stream = env.stream("queryable", "SELECT k, COUNT(*) AS n FROM {src}.t1 GROUP BY k")
    stream.refresh(expect="full")
    spark = env.spark
    total = spark.sql(f"SELECT SUM(n) AS total FROM {stream.view}").collect()[0].total
    assert total == len(INITIAL["t1"])
    assert [c.lower() for c in spark.table(stream.view).columns] == ["k", "n"]
    env.apply([S.Insert("t1", [S.row(None, 7, "a")])])
    stream.refresh(expect="differential")
    assert spark.sql(f"SELECT n FROM {stream.view} WHERE k = 7").collect()[0].n == 1


def test_explicit_source_path_outside_the_warehouse(env, tmp_path):
    path = str(tmp_path / "elsewhere" / "facts")
    S.create_source(path, INITIAL["t1"])
    env.paths["facts"] = path
    sql = env.sql("SELECT g, SUM(d) AS sd, COUNT(*) AS n FROM {src}.facts GROUP BY g")
    stream = env.stream("explicit_path", sql, sources={f"{env.src}.facts": path})
    stream.refresh(expect="full")
    stream.check()
    env.apply([S.Insert("facts", [S.row(None, 1, "q", 1, 1.0, "5.55")]), S.DeleteWhere("facts", "g", "a")])
    stream.refresh(expect="differential")
    stream.check()


def test_embedded_engine_chosen_explicitly(env):
    env.source("t1", INITIAL["t1"])
    env.source("t2", INITIAL["t2"])
    stream = env.stream("embedded", SHAPES_BY_NAME["join_agg"].sql, engine="embedded")
    stream.refresh(expect="full")
    stream.check()
    env.apply(SMOKE_BATCHES[0], only_existing=True)
    stream.refresh(expect="differential")
    stream.check()


def test_a_full_refresh_reuses_sparks_analysis_while_query_settings_and_schemas_hold(env, monkeypatch):
    """Spark's analysis of the query (output names, aggregate argument types) is a round trip
    over Connect and Thrift: a full refresh of the same definition over the same source schemas
    and result settings takes it from the last refresh's metadata, and a full refresh `auto`
    falls back to takes it from the attempt; a changed setting that can change results (here
    the time zone) analyses again, and the results equal the recompute throughout."""
    from python_helpers.runtime.refresh import full, read_cost

    for t in ("t1", "t2"):
        env.source(t, INITIAL[t])
    stream = env.stream("reanalysed", AGG, refresh_mode="full")
    stream.refresh(expect="full")
    analysed: list = []
    names = full.output_names

    def counted(conn, model, plan, bindings):
        analysed.append(model)
        return names(conn, model, plan, bindings)

    monkeypatch.setattr(full, "output_names", counted)
    env.apply(SMOKE_BATCHES[0], only_existing=True)
    stream.refresh(expect="full")
    stream.check()
    assert analysed == []
    # `auto` gives way after the differential attempt analysed the query (its reads estimated
    # over a rebuild's, with the size floor lowered to these small tables).
    monkeypatch.setattr(read_cost, "MIN_FULL_BYTES", 0)
    monkeypatch.setattr(read_cost, "FULL_WHEN_READ_RATIO_OVER", 0.0)
    env.apply(SMOKE_BATCHES[1], only_existing=True)
    result = stream.refresh(expect="full", refresh_mode="auto")
    assert "a full refresh is cheaper" in result.reason, result.reason
    stream.check()
    assert analysed == []
    monkeypatch.undo()
    monkeypatch.setattr(full, "output_names", counted)
    zone = env.spark.conf.get("spark.sql.session.timeZone")
    env.spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
    try:
        result = stream.refresh(expect="full", refresh_mode="auto")
        assert "spark.sql.session.timeZone" in result.reason
        assert analysed == [stream.model]
        stream.check()
    finally:
        env.spark.conf.set("spark.sql.session.timeZone", zone)
