"""Cost-driven choices of a refresh, each checked against the oracle: `auto` switching to a full
refresh on a large change, the periodic recompute of floating-point aggregates, the reuse of the
last refresh's analysis (and what happens when source types change), and the stream table's
view over its published link directory."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from sqlglot import exp

from python_helpers.errors import InvalidConfig
from python_helpers.runtime.delta.embedded import generations as published_files
from python_helpers.runtime.delta.embedded import publishing
from python_helpers.runtime.delta.locations import storage_path
from tests.support import sources as S
from tests.support import spies
from tests.support.shapes import INITIAL, SHAPES_BY_NAME, SMOKE_BATCHES

pytestmark = pytest.mark.spark

AGG = "SELECT k, COUNT(*) AS n, SUM(v) AS sv, SUM(x) AS sx FROM {src}.t1 GROUP BY k"


def _many(n, start=100):
    return [S.row(start + i, i % 4, "abc"[i % 3], i % 11 - 5, i / 8, f"{i}.25", "2024-01-01") for i in range(n)]


def test_auto_refreshes_in_full_when_the_change_is_large_and_says_why(env):
    env.source("t1", _many(12_000))
    stream = env.stream("large_change", AGG, auto_full_threshold=0.25)
    stream.refresh(expect="full")
    env.apply([S.Insert("t1", _many(3, start=100_000))])
    stream.refresh(expect="differential")
    stream.check()
    # 6,000 rows updated: 12,000 change rows (old and new image), all of the table.
    env.apply([S.UpdateWhere("t1", "k", 1, {"v": 5}), S.UpdateWhere("t1", "k", 2, {"v": 5})])
    result = stream.refresh(expect="full")
    assert "auto_full_threshold=0.25" in result.reason and "full refresh is cheaper" in result.reason
    stream.check()
    # The next small change is differential again, from the offsets the full refresh stored.
    env.apply([S.DeleteRows("t1", [0])])
    stream.refresh(expect="differential")
    stream.check()


def _bytes(path: str) -> int:
    """The bytes of a Delta table's live data files."""
    from deltalake import DeltaTable

    return sum(DeltaTable(path).get_add_actions(flatten=True).column("size_bytes").to_pylist())


def test_auto_refreshes_in_full_when_the_delta_would_read_more_than_a_rebuild(env, monkeypatch):
    """A semi join under an aggregate whose both inputs changed reads each snapshot several
    times; with the size floor lowered to these small tables, `auto` rebuilds and says why."""
    from python_helpers.runtime.refresh import read_cost

    sql = SHAPES_BY_NAME["exists_correlated"].sql
    for t in ("t1", "t2"):
        env.source(t, INITIAL[t])
    stream = env.stream("read_cost", sql)
    stream.refresh(expect="full")
    forced = env.stream("read_cost_diff", sql, refresh_mode="differential")
    forced.refresh(expect="full")
    batch = [S.Insert("t1", [S.row(900, 1, "a", 3, 0.5, "1.00", None)]), S.UpdateWhere("t2", "k", 1, {"v": 7})]
    env.apply(batch)
    # A rebuild reads both sources and writes the whole result: its bytes count both.
    rebuild = sum(_bytes(env.paths[t]) for t in ("t1", "t2")) + _bytes(
        storage_path(env.spark, env.target, stream.identifier)
    )
    # With the defaults, small sources are never judged: differential.
    kept = stream.refresh(expect="differential")
    ratio = kept.counters["read_ratio_pct"] / 100
    assert kept.counters["read_bytes"] > 0 and ratio > 0
    assert kept.counters["full_read_bytes"] == rebuild, (kept.counters, rebuild)
    stream.check()
    # Its history entry keeps the estimate, for auto to learn from (auto.learned_read_bar).
    from python_helpers.runtime.delta.embedded import storage
    from python_helpers.runtime.refresh import costs

    entry = costs.completed(storage.read_metadata(storage_path(env.spark, env.target, stream.identifier)))[-1]
    assert entry["mode"] == "differential" and entry["read_ratio_pct"] == kept.counters["read_ratio_pct"], entry
    monkeypatch.setattr(read_cost, "MIN_FULL_BYTES", 0)
    monkeypatch.setattr(read_cost, "FULL_WHEN_READ_RATIO_OVER", ratio / 2)
    env.apply(batch[:1] + [S.UpdateWhere("t2", "k", 2, {"v": 9})])
    rebuilt = stream.refresh(expect="full")
    assert "would read" in rebuilt.reason and "a full refresh is cheaper" in rebuilt.reason, rebuilt.reason
    # Its delta computes intermediates first (the semi join's keys): judged on the whole SQL
    # before any of them ran (read_budget.ReadBudget.check_ahead).
    assert "judged before its intermediates were computed" in rebuilt.reason, rebuilt.reason
    stream.check()
    # refresh_mode='differential' never switches
    forced.refresh(expect="differential")
    forced.check()


@pytest.mark.parametrize(
    "rows, config, ops",
    [
        # The switch is for large deltas: under AUTO_FULL_MIN_CHANGE_ROWS change rows it never fires.
        (10, {"auto_full_threshold": 0.01}, [S.UpdateWhere("t1", "k", 1, {"v": 5}), S.DeleteWhere("t1", "k", 2)]),
        # differential mode never switches (11,000 change rows).
        (
            12_000,
            {"refresh_mode": "differential", "auto_full_threshold": 0.01},
            [S.UpdateWhere("t1", "g", "a", {"v": 5}), S.DeleteWhere("t1", "k", 2)],
        ),
        # threshold 0 disables the switch (~11,000 change rows).
        (
            12_000,
            {"auto_full_threshold": 0},
            [S.UpdateWhere("t1", "k", 0, {"v": 5}), S.UpdateWhere("t1", "k", 1, {"v": 5})],
        ),
    ],
    ids=["small_table", "differential_mode", "threshold_zero"],
)
def test_large_change_stays_differential_when_the_switch_does_not_apply(env, rows, config, ops):
    env.source("t1", _many(rows))
    stream = env.stream("stays_diff", AGG, **config)
    stream.refresh(expect="full")
    env.apply(ops)
    stream.refresh(expect="differential")
    stream.check()


@pytest.mark.parametrize(
    "config",
    [
        {"auto_full_threshold": 1.5},
        {"auto_full_threshold": "high"},
        {"float_recompute_every": -1},
        {"float_recompute_every": 2.5},
    ],
)
def test_bad_cost_configs_name_the_model_and_the_setting(env, config):
    env.source("t1", INITIAL["t1"])
    stream = env.stream("bad_cfg", AGG, **config)
    with pytest.raises(InvalidConfig, match=f"{stream.model}.*{next(iter(config))}"):
        stream.refresh()


def test_float_aggregates_are_recomputed_every_n_refreshes_when_asked(env):
    env.source("t1", INITIAL["t1"])
    stream = env.stream("float_recompute", AGG, float_recompute_every=2)
    stream.refresh(expect="full")
    modes = []
    for i in range(5):
        env.apply([S.Insert("t1", [S.row(500 + i, i % 3, "a", i, 0.1 * (i + 1), "1.00", None)])])
        result = stream.refresh()
        modes.append(result.mode)
        if result.mode == "full":
            assert "float_recompute_every=2" in result.reason
        stream.check()
    assert modes == ["differential", "differential", "full", "differential", "differential"]


def test_float_recompute_does_nothing_without_float_aggregates(env):
    env.source("t1", INITIAL["t1"])
    stream = env.stream("no_floats", "SELECT k, SUM(v) AS sv FROM {src}.t1 GROUP BY k", float_recompute_every=1)
    stream.refresh(expect="full")
    for i in range(3):
        env.apply([S.Insert("t1", [S.row(600 + i, 1, "b", i)])])
        stream.refresh(expect="differential")
        stream.check()


def test_a_source_column_type_change_rebuilds_instead_of_mixing_states(env):
    env.source("t1", INITIAL["t1"])
    stream = env.stream("type_change", "SELECT k, SUM(v) AS sv, AVG(v) AS av FROM {src}.t1 GROUP BY k")
    stream.refresh(expect="full")
    env.apply([S.Insert("t1", [S.row(700, 1, "a", 4)])])
    stream.refresh(expect="differential")
    # v becomes BIGINT: the stored sums were laid out for INT arguments.
    data = pa.Table.from_pylist(S.read_rows(env.paths["t1"]), schema=S.SCHEMA)
    data = data.set_column(
        data.schema.get_field_index("v"), pa.field("v", pa.int64()), data.column("v").cast(pa.int64())
    )
    write_deltalake(env.paths["t1"], data, mode="overwrite", schema_mode="overwrite")
    result = stream.refresh(expect="full")
    assert "column v of source" in result.reason and "changed type from int to bigint" in result.reason, result.reason
    stream.check()
    env.apply([S.DeleteRows("t1", [0])])
    stream.refresh(expect="differential")
    stream.check()


def test_the_view_reads_one_generation_directory_and_follows_every_refresh(env):
    sql = SHAPES_BY_NAME["join2"].sql
    env.source("t1", INITIAL["t1"])
    env.source("t2", INITIAL["t2"])
    stream = env.stream("published", sql)
    stream.refresh(expect="full")
    root = published_files.stream_root(storage_path(env.spark, env.target, "published"))
    seen = []
    for batch in (
        [S.Insert("t1", [S.row(800, 1, "a", 1)])],
        [S.DeleteWhere("t2", "k", 0)],
        [S.UpdateWhere("t1", "k", 2, {"k": 3})],
    ):
        env.apply(batch)
        stream.refresh(expect="differential")
        stream.check()
        # The view names the generation of the newest stored version (a fixed directory, never
        # a file list), and the marker records it.
        text = env.spark.sql(f"SHOW CREATE TABLE {stream.view}").collect()[0][0]
        marker = publishing.stream_table_marker(env.spark, storage_path(env.spark, env.target, "published"))
        assert f"{root}/{marker['generation']}" in text, text
        seen.append(marker["generation"])
    assert len(set(seen)) == 3


def test_changes_that_cancel_out_count_as_no_change(env):
    env.source("t1", INITIAL["t1"])
    env.source("t2", INITIAL["t2"])
    stream = env.stream("cancel", SHAPES_BY_NAME["join2"].sql)
    stream.refresh(expect="full")
    env.apply([S.UpdateRows("t2", [0, 1], {"x": 9.5})])  # a column the query does not read
    result = stream.refresh(expect="differential")
    assert result.rows_changed == 0
    stream.check()


def _jobs_during(spark, group: str, action):
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    try:
        result = action()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return result, list(sc.statusTracker().getJobIdsForGroup(group))


def test_a_refresh_with_no_source_change_runs_no_spark_job(env):
    env.source("t1", INITIAL["t1"])
    stream = env.stream("no_job", AGG)
    stream.refresh(expect="full")
    result, jobs = _jobs_during(env.spark, f"noop-{env.target}", lambda: stream.refresh(expect="differential"))
    assert result.skipped and jobs == []
    # The same probe sees the jobs of a refresh that has work to do (the probe itself works).
    env.apply([S.Insert("t1", [S.row(900, 1, "a", 1)])])
    result, jobs = _jobs_during(env.spark, f"work-{env.target}", lambda: stream.refresh(expect="differential"))
    assert not result.skipped and jobs
    stream.check()


def test_a_join_reads_only_the_files_whose_statistics_meet_the_change(env):
    """The other side of a join is read from the files whose min/max of the join key can hold
    a changed key (the log's statistics). Files of NULL keys only are skipped, files mixing NULL
    and values kept; the result equals the recompute whatever is skipped."""
    env.source("t1", [S.row(i, k=i, v=i) for i in range(1, 5)])
    path = env.source("t2", [S.row(1, k=1, v=10), S.row(2, k=2, v=20)])
    for rows in (
        [S.row(3, k=10, v=1), S.row(4, k=12, v=2)],
        [S.row(5, k=None, v=3)],
        [S.row(6, k=None, v=4), S.row(7, k=20, v=5)],
        [S.row(8, k=30, v=6), S.row(9, k=31, v=7)],
    ):
        write_deltalake(path, S.to_arrow(rows), mode="append")
    stream = env.stream(
        "skipping",
        "SELECT a.k, COUNT(*) AS n, SUM(b.v) AS sv FROM {src}.t1 a JOIN {src}.t2 b ON a.k = b.k GROUP BY a.k",
    )
    stream.refresh(expect="full")
    env.apply([S.Insert("t1", [S.row(50, k=12, v=1), S.row(51, k=31, v=1), S.row(52, k=None, v=1)])])
    result = stream.refresh(expect="differential")
    stream.check()
    assert result.counters["files_skipped"] >= 2, result.counters  # k=1..2, NULL-only, k=20 files
    assert 0 < result.counters["files_read"] <= 3, result.counters
    env.apply([S.UpdateWhere("t2", "k", 12, {"v": 100}), S.Insert("t1", [S.row(53, k=20, v=1)])])
    stream.refresh(expect="differential")
    stream.check()


def test_a_change_read_by_spark_still_narrows_the_join_by_statistics(env, monkeypatch):
    """A change too large for the driver is read by Spark; its distinct join keys (one small
    job) still rule out files of the other input, and the result equals the recompute."""
    from python_helpers.runtime.delta.embedded import change_feed

    monkeypatch.setattr(change_feed, "DRIVER_READ_MAX_ROWS", 0)
    env.source("t1", [S.row(i, k=i, v=i) for i in range(1, 5)])
    path = env.source("t2", [S.row(1, k=1, v=10), S.row(2, k=2, v=20)])
    for rows in (
        [S.row(3, k=10, v=1), S.row(4, k=12, v=2)],
        [S.row(5, k=None, v=3)],
        [S.row(8, k=30, v=6), S.row(9, k=31, v=7)],
    ):
        write_deltalake(path, S.to_arrow(rows), mode="append")
    stream = env.stream(
        "skipping_spark",
        "SELECT a.k, COUNT(*) AS n, SUM(b.v) AS sv FROM {src}.t1 a JOIN {src}.t2 b ON a.k = b.k GROUP BY a.k",
    )
    stream.refresh(expect="full")
    env.apply([S.Insert("t1", [S.row(50, k=12, v=1), S.row(51, k=31, v=1)]), S.DeleteRows("t1", [2])])
    result = stream.refresh(expect="differential")
    stream.check()
    assert result.counters["files_skipped"] >= 1, result.counters
    assert 0 < result.counters["files_read"] < 4, result.counters


@pytest.mark.parametrize("key", ["k", "dt"])
def test_a_change_with_too_many_keys_narrows_the_join_by_key_ranges(env, monkeypatch, key):
    """A change whose distinct keys are too many to fetch is summed up as [min, max] ranges of
    its keys (one small job); files outside every range are skipped, NULL-only files too, and the
    result equals the recompute after inserts, updates and deletes."""
    from python_helpers.runtime.delta.embedded import bindings as binding
    from python_helpers.runtime.delta.embedded import change_feed

    monkeypatch.setattr(change_feed, "DRIVER_READ_MAX_ROWS", 0)
    monkeypatch.setattr(binding, "MAX_KEYS", 1)

    def r(i, n, v):
        day = None if n is None else f"2024-{1 + n // 28:02d}-{1 + n % 28:02d}"
        return S.row(i, k=n, v=v, dt=day)

    env.source("t1", [r(i, i, i) for i in range(1, 5)])
    path = env.source("t2", [r(1, 1, 10), r(2, 2, 20)])
    for rows in ([r(3, 100, 1), r(4, 102, 2)], [r(5, None, 3)], [r(6, None, 4), r(7, 150, 5)], [r(8, 300, 6)]):
        write_deltalake(path, S.to_arrow(rows), mode="append")
    stream = env.stream(
        f"ranges_{key}",
        f"SELECT a.{key}, COUNT(*) AS n, SUM(b.v) AS sv FROM {{src}}.t1 a JOIN {{src}}.t2 b ON a.{key} = b.{key} "
        f"GROUP BY a.{key}",
    )
    stream.refresh(expect="full")
    env.apply([S.Insert("t1", [r(50, 101, 1), r(51, 102, 1), r(52, None, 1), r(53, 300, 1)]), S.DeleteRows("t1", [2])])
    result = stream.refresh(expect="differential")
    stream.check()
    assert result.counters["files_skipped"] >= 2, result.counters  # the NULL-only file and the one of 150
    assert 0 < result.counters["files_read"], result.counters
    env.apply([S.UpdateWhere("t2", "id", 7, {"v": 50}), S.Insert("t1", [r(54, 150, 1), r(55, 2, 1)])])
    stream.refresh(expect="differential")
    stream.check()


@pytest.mark.parametrize("key", ["k", "dt"])
def test_a_change_of_few_keys_filters_the_other_join_input_by_them(env, key):
    """Every file of the other input spans the whole key range, so statistics skip none; a
    change of few keys then filters that input's rows by them (Parquet skips pages by its
    column index). The result equals the recompute after inserts, updates and deletes on both
    sides, NULL keys included, and the session's settings are put back after each refresh."""
    from python_helpers.runtime.connections.base import NO_DICTIONARY_FILTER
    from python_helpers.runtime.refresh import scan_settings

    def r(i, n, v):
        day = None if n is None else f"2024-{1 + n // 28:02d}-{1 + n % 28:02d}"
        return S.row(i, k=n, v=v, dt=day)

    env.source("t1", [r(i, i, i) for i in range(1, 40)])
    path = env.source("t2", [r(100 + i, i, i) for i in range(0, 80, 3)])
    for start in (1, 2):
        write_deltalake(
            path,
            S.to_arrow([r(200 * start + i, i, i) for i in range(start, 80, 3)] + [r(300 * start, None, 1)]),
            mode="append",
        )
    stream = env.stream(
        f"key_filter_{key}",
        f"SELECT a.{key}, COUNT(*) AS n, SUM(b.v) AS sv FROM {{src}}.t1 a JOIN {{src}}.t2 b ON a.{key} = b.{key} "
        f"GROUP BY a.{key}",
    )
    stream.refresh(expect="full")
    settings = (scan_settings.IN_FILTER_THRESHOLD, *NO_DICTIONARY_FILTER)
    before = [env.spark.conf.get(key, None) for key in settings]
    env.apply([S.Insert("t1", [r(50, 7, 1), r(51, 61, 1), r(52, None, 1)]), S.DeleteRows("t1", [2])])
    result = stream.refresh(expect="differential")
    stream.check()
    assert result.counters["reads_filtered_by_keys"] >= 1 and result.counters["files_skipped"] == 0, result.counters
    assert [env.spark.conf.get(key, None) for key in settings] == before
    env.apply([S.UpdateWhere("t2", "k", 61, {"v": 50}), S.DeleteWhere("t2", "k", 7), S.Insert("t1", [r(53, 9, 1)])])
    stream.refresh(expect="differential")
    stream.check()
    assert [env.spark.conf.get(key, None) for key in settings] == before


def test_a_change_of_many_keys_reads_the_other_join_input_unfiltered(env, monkeypatch):
    """Over bound_views.PAGE_FILTER_KEYS distinct keys no key list is sent (Spark hands Parquet
    one OR per key); the result still equals the recompute."""
    from python_helpers.runtime.delta import bound_views

    monkeypatch.setattr(bound_views, "PAGE_FILTER_KEYS", 1)
    env.source("t1", [S.row(i, k=i, v=i) for i in range(1, 20)])
    env.source("t2", [S.row(100 + i, k=i % 10, v=i) for i in range(30)])
    stream = env.stream(
        "key_filter_many",
        "SELECT a.k, COUNT(*) AS n, SUM(b.v) AS sv FROM {src}.t1 a JOIN {src}.t2 b ON a.k = b.k GROUP BY a.k",
    )
    stream.refresh(expect="full")
    env.apply([S.Insert("t1", [S.row(50, k=3, v=1), S.row(51, k=4, v=1)])])
    result = stream.refresh(expect="differential")
    stream.check()
    assert result.counters["reads_filtered_by_keys"] == 0, result.counters


def test_auto_learns_from_the_models_own_refreshes_and_says_why(env, monkeypatch):
    """Each commit records what the refreshes cost (the newest one's length completed by the
    next refresh from its commit time); `auto` goes full when the recorded differential
    refreshes took longer than the recorded full ones. The margin is moved instead of the
    timings (real refreshes): first so that any differential refresh counts as slower, then so
    that none does."""
    from python_helpers.runtime.delta.embedded import storage
    from python_helpers.runtime.refresh import auto, costs

    env.source("t1", _many(40))
    stream = env.stream("learns", AGG, auto_from_history=True)
    path = storage_path(env.spark, env.target, stream.identifier)
    stream.refresh(expect="full")
    env.apply([S.UpdateWhere("t1", "k", 1, {"v": 5})])
    first = stream.refresh(expect="differential")  # no differential refresh in the history yet
    counted = sum(first.counters["change_rows"].values())
    history = costs.completed(storage.read_metadata(path))
    assert [e["mode"] for e in history] == ["full", "differential"], history
    assert history[0]["reason"] == "first build" and history[0]["seconds"] > 0
    assert history[1]["change_rows"] == counted > 0 and history[1]["seconds"] > 0
    assert "plan" in history[1]["phases"]
    monkeypatch.setattr(auto, "SLOWER_THAN_FULL", 1e-6)
    env.apply([S.UpdateWhere("t1", "k", 2, {"v": 6})])
    learned = stream.refresh(expect="full")
    assert f"the last differential refresh of {counted:,} or fewer change rows took" in learned.reason, learned.reason
    assert "a full refresh is faster for" in learned.reason, learned.reason
    stream.check()
    monkeypatch.setattr(auto, "SLOWER_THAN_FULL", 1e6)
    env.apply([S.UpdateWhere("t1", "k", 3, {"v": 7})])
    stream.refresh(expect="differential")
    stream.check()
    history = costs.completed(storage.read_metadata(path))
    assert [e["mode"] for e in history] == ["full", "differential", "full", "differential"], history
    assert "a full refresh is faster" in history[2]["reason"]


def test_a_failed_refresh_is_recorded_and_a_history_it_cannot_write_changes_nothing(env):
    """The adapter records a failed refresh in the schema's history table; where it cannot (a
    user's table sits at that name) the failure stays the refresh's own error and the user's
    table is left as it is."""
    import time

    from dbt.adapters.spark_stream.impl import _record_failure
    from python_helpers.runtime.refresh.requests import RefreshRequest

    spark = env.spark
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {env.target}")
    request = RefreshRequest(model="model.p.m", schema=env.target, identifier="m", sql="SELECT 1 AS x")
    _record_failure(spark, request, RuntimeError("boom; the source is gone"), int(time.time() * 1000) - 1500)
    rows = [r.asDict() for r in spark.sql(f"SELECT * FROM {env.target}.stream_table_refresh_history").collect()]
    assert len(rows) == 1 and rows[0]["mode"] == "failed" and rows[0]["stream_table"] == "m", rows
    assert rows[0]["reason"] == "RuntimeError: boom; the source is gone" and rows[0]["seconds"] >= 1.5, rows

    other = env.target + "_user"
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {other}")
    spark.sql(f"CREATE TABLE {other}.stream_table_refresh_history (x INT) USING parquet")
    spark.sql(f"INSERT INTO {other}.stream_table_refresh_history VALUES (1)")
    request = RefreshRequest(model="model.p.m", schema=other, identifier="m", sql="SELECT 1 AS x")
    _record_failure(spark, request, RuntimeError("boom"), int(time.time() * 1000))  # does not raise
    assert [tuple(r) for r in spark.sql(f"SELECT * FROM {other}.stream_table_refresh_history").collect()] == [(1,)]

    # Ours, written by an older version without today's columns: made again, its failed rows kept.
    from python_helpers.runtime.catalog.views import ROLE_PROPERTY
    from python_helpers.runtime.history import ROLE

    older = env.target + "_older"
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {older}")
    spark.sql(
        f"CREATE TABLE {older}.stream_table_refresh_history (stream_table STRING, mode STRING, reason STRING, "
        f"started_at TIMESTAMP) USING parquet TBLPROPERTIES ('{ROLE_PROPERTY}' = '{ROLE}')"
    )
    spark.sql(
        f"INSERT INTO {older}.stream_table_refresh_history VALUES ('m', 'failed', 'earlier', current_timestamp())"
    )
    request = RefreshRequest(model="model.p.m", schema=older, identifier="m", sql="SELECT 1 AS x")
    _record_failure(spark, request, RuntimeError("again"), int(time.time() * 1000))
    kept = spark.sql(f"SELECT reason, rule, mode FROM {older}.stream_table_refresh_history ORDER BY reason").collect()
    assert [tuple(r) for r in kept] == [("RuntimeError: again", None, "failed"), ("earlier", None, "failed")], kept


@pytest.mark.parametrize("shape", ["project_bag", "agg_minmax", "join2", "distinct"])
def test_a_small_change_joins_only_the_stored_rows_it_can_match(env, monkeypatch, shape):
    """The restricted read of the stored result (a semi join broadcasting the delta's row ids),
    which the suite's small tables would not reach, forced on: the result equals the recompute
    after inserts, updates and deletes, the MERGE rows' query did restrict its read, and the
    delta it then names twice was computed once. A bag stored as its rows come is looked up
    this way only where the executors apply its change (where delta-rs does, the dbt process
    looks its tuples up: bag_lookup.py), so that is what the bag shapes take here."""
    from python_helpers.dvm import bag_result, stored_result
    from python_helpers.runtime.delta.embedded.engine import EmbeddedDelta
    from python_helpers.runtime.refresh import differential

    monkeypatch.setattr(differential, "RESTRICT_STORAGE_BYTES", 0)
    monkeypatch.setattr(EmbeddedDelta, "looks_up_tuples", lambda self, target, version: False)
    restricted = spies.replaced(monkeypatch, stored_result, "touched_storage")
    once = spies.replaced(monkeypatch, stored_result, "delta_once")
    spies.replaced(monkeypatch, bag_result, "touched_storage", restricted)
    spies.replaced(monkeypatch, bag_result, "delta_once", once)
    env.source("t1", INITIAL["t1"])
    env.source("t2", INITIAL["t2"])
    stream = env.stream(f"restricted_{shape}", SHAPES_BY_NAME[shape].sql)
    stream.refresh(expect="full")
    for batch in (
        [S.Insert("t1", [S.row(900, 1, "a", 4), S.row(901, 2, "b", 7)]), S.DeleteWhere("t2", "k", 0)],
        [S.UpdateWhere("t1", "k", 2, {"k": 3}), S.UpdateWhere("t2", "k", 1, {"v": 9})],
        [S.DeleteWhere("t1", "k", 1)],
    ):
        env.apply(batch)
        stream.refresh(expect="differential")
        stream.check()
    assert restricted and all(restricted), restricted
    # The delta the MERGE rows' query names twice (its rows, the row ids they reach) is
    # materialized once.
    assert once and all(once), once


@pytest.mark.parametrize("grouped", [True, False], ids=["grouped", "global"])
def test_a_min_max_group_is_rescanned_only_when_a_deletion_reaches_its_extremum(env, monkeypatch, grouped):
    """The rescan of a group (its whole input, at the new version) leaves Spark's plan when no
    group is flagged: the flags are computed first and an empty set is folded away. For a
    global aggregate the rescan is a scan of the whole source."""
    from python_helpers.runtime.connections import spark as connections

    # The counts arrive through a listener: waited for longer than a refresh does, so that a
    # busy machine does not leave them unknown (the refresh would then ask, still correctly).
    monkeypatch.setattr(connections._Observed, "WAIT_SECONDS", 5.0)
    plans: list = []
    original = connections.SparkConnection.arrow

    def spy(self, sql, *args, **kwargs):
        if "__dvm_action" in sql:  # the MERGE rows' query
            plans.append(str(self.spark.sql(sql)._jdf.queryExecution().optimizedPlan().toString()))
        return original(self, sql, *args, **kwargs)

    monkeypatch.setattr(connections.SparkConnection, "arrow", spy)
    bound: list = []  # the views of source files each refresh binds
    original_files = connections.SparkConnection.view_of_files

    def files_spy(self, name, *args, **kwargs):
        bound.append(name)
        return original_files(self, name, *args, **kwargs)

    monkeypatch.setattr(connections.SparkConnection, "view_of_files", files_spy)
    asked: list = []  # the queries that ask which groups are flagged
    original_query = connections.SparkConnection.view_of_query

    def query_spy(self, name, sql, *args, **kwargs):
        if "WHERE __dvm_rescan" in sql:
            asked.append(name)
        return original_query(self, name, sql, *args, **kwargs)

    monkeypatch.setattr(connections.SparkConnection, "view_of_query", query_spy)
    env.source("t1", _many(400))
    sql = "SELECT MIN(v) AS lo, MAX(v) AS hi, COUNT(*) AS n, COUNT(x) AS nx FROM {src}.t1"
    if grouped:
        sql = sql.replace("SELECT", "SELECT k,") + " GROUP BY k"
    stream = env.stream(f"minmax_flags_{'grouped' if grouped else 'global'}", sql, refresh_mode="differential")
    stream.refresh(expect="full")

    def reads_the_source(plan: str) -> bool:
        # t1's files bound as a relation (the change rows are a local relation, the stored
        # result has no column `v`).
        return any(
            line.lstrip(":- +").startswith("Relation [") and " v#" in line.replace("[", " ").replace(",", " ")
            for line in plan.splitlines()
        )

    # An insert inside every group's range: no extremum lost, no rescan in the plan, and the
    # source's new snapshot not even bound (a file listing and a schema job), nor a query run
    # to ask for the flagged groups: the groups' computation counted none.
    env.apply([S.Insert("t1", _many(4, start=9_000))])
    bound.clear()
    stream.refresh(expect="differential")
    assert not [n for n in bound if n.endswith("_s0_new")], bound
    assert not asked, asked
    stream.check()
    assert plans and not reads_the_source(plans[-1]), plans[-1]
    # Another column of the rows holding each group's maximum updated: the value is deleted and
    # inserted again, nets to nothing per value, and flags no group.
    env.apply([S.UpdateWhere("t1", "v", 5, {"x": 0.5})])
    stream.refresh(expect="differential")
    stream.check()
    assert not reads_the_source(plans[-1]), plans[-1]
    assert not asked, asked
    # Deleting each group's maximum (v = 5) flags the groups: the rescan reads the source.
    env.apply([S.DeleteWhere("t1", "v", 5)])
    bound.clear()
    stream.refresh(expect="differential")
    assert [n for n in bound if n.endswith("_s0_new")], bound
    assert asked, "the flagged groups were not asked for"
    stream.check()
    assert reads_the_source(plans[-1]), plans[-1]


OUTER = "SELECT a.id, a.k, a.v, b.g AS bg, b.x AS bx FROM {src}.t1 a LEFT JOIN {src}.t2 b ON a.k = b.k"


# An anti join whose inputs are a filter of one source and a projection of the other.
ANTI_FILTERED = (
    "SELECT a.id, a.k FROM {src}.t1 a WHERE a.v > 0 AND NOT EXISTS (SELECT 1 FROM {src}.t2 b WHERE b.k = a.k)"
)


# Aggregates below the root (recomputed for the changed keys): a DISTINCT of (g, k) pairs under
# COUNT(DISTINCT), and a GROUP BY under another.
DISTINCT_BELOW = "SELECT g, COUNT(DISTINCT k) AS dk FROM {src}.t1 GROUP BY g"
NESTED_GROUPS = (
    "SELECT n, COUNT(*) AS ks FROM (SELECT k, COUNT(*) AS n FROM {src}.t1 WHERE v > -3 GROUP BY k) GROUP BY n"
)


@pytest.mark.parametrize(
    "sql",
    [OUTER, ANTI_FILTERED, DISTINCT_BELOW, NESTED_GROUPS],
    ids=["outer", "anti_filtered", "distinct_below", "nested_groups"],
)
def test_a_changed_source_of_an_outer_join_is_read_once_its_old_rows_are_new_minus_change(env, monkeypatch, sql):
    """The key-restricted recompute (a join's, an aggregate's below the root) reads a changed
    plain source (or a filter or projection of one) at the new version only (its old rows: those
    minus the change): the MERGE rows' query names no old snapshot of it."""
    from python_helpers.runtime.connections import spark as connections

    merges: list = []
    original = connections.SparkConnection.arrow

    def spy(self, sql, *args, **kwargs):
        # The MERGE rows, or a bag's change its MERGE rows are resolved from (bag_lookup.py).
        merges.append(sql)
        return original(self, sql, *args, **kwargs)

    monkeypatch.setattr(connections.SparkConnection, "arrow", spy)
    for t in ("t1", "t2"):
        env.source(t, INITIAL[t])
    name = {OUTER: "outer", ANTI_FILTERED: "anti", DISTINCT_BELOW: "distinct", NESTED_GROUPS: "nested"}[sql]
    stream = env.stream(f"once_{name}", sql, refresh_mode="differential")
    stream.refresh(expect="full")
    for batch in SMOKE_BATCHES[:1]:  # inserts, duplicates, NULL keys, key moves on both sides
        env.apply(batch, only_existing=True)
        stream.refresh(expect="differential")
        stream.check()
        sql = merges[-1]
        # Sources bind by sorted name (t1: s0, t2: s1); an unchanged one may still be read old.
        for source in ("s0", "s1"):
            assert f"_{source}_chg" not in sql or f"_{source}_old" not in sql, sql


def test_a_change_that_does_not_fit_its_sources_new_rows_rebuilds_and_says_why(env, monkeypatch):
    """Old rows read as new rows minus a change that does not match them (here: a change counted
    twice) would have negative counts: the refresh stops before writing and runs in full."""
    from python_helpers.dvm.operators import restricted_reads

    original = restricted_reads.minus_change

    def doubled(ctx, columns, new_rows, change):
        twice = exp.union(change.copy(), change.copy(), distinct=False)
        return original(ctx, columns, new_rows, exp.select("*").from_(twice.subquery("__t")))

    for t in ("t1", "t2"):
        env.source(t, INITIAL[t])
    stream = env.stream("outer_misfit", OUTER, refresh_mode="differential")
    stream.refresh(expect="full")
    monkeypatch.setattr(restricted_reads, "minus_change", doubled)
    env.apply([S.DeleteWhere("t1", "k", 1), S.UpdateWhere("t2", "k", 1, {"x": 7.5})])
    result = stream.refresh(expect="full")
    assert restricted_reads.OLD_ROWS_BROKEN in result.reason, result.reason
    stream.check()


def test_a_change_that_a_filter_keeps_none_of_skips_the_reads_it_would_feed(env, monkeypatch):
    """A filter right over a changed source that keeps none of the change rows (Spark folds it
    into the rows this process sent: no job) leaves its branch unchanged: the join above reads
    nothing for it. Where it keeps some, the branch is differentiated as before."""
    from python_helpers.runtime.delta.embedded.bindings import Bindings

    answers: list = []
    asked = Bindings.empty_change

    def spy(self, relation, key, query):
        answers.append((relation.split(".")[-1], asked(self, relation, key, query)))
        return answers[-1][1]

    monkeypatch.setattr(Bindings, "empty_change", spy)
    env.source("t1", [S.row(i, k=i % 5, g="abc"[i % 3], v=i) for i in range(20)])
    env.source("t2", [S.row(i, k=i % 5, v=i, dt=f"2024-0{1 + i % 6}-01") for i in range(30)])
    stream = env.stream(
        "filtered_change",
        "SELECT a.k, a.g, b.total FROM {src}.t1 a JOIN "
        "(SELECT k, SUM(v) AS total FROM {src}.t2 WHERE dt >= DATE'2024-04-01' GROUP BY k) b ON a.k = b.k",
    )
    stream.refresh(expect="full")
    # Rows before April only: the filter keeps none, and only t2 changed: nothing to merge.
    env.apply([S.Insert("t2", [S.row(100, k=1, v=7, dt="2024-02-01")]), S.UpdateWhere("t2", "id", 2, {"v": 50})])
    quiet = stream.refresh(expect="differential")
    stream.check()
    assert set(answers) == {("t2", True)}, answers  # (asked again by each rendering, answered once)
    assert quiet.rows_changed == 0, quiet.rows_changed
    # Both change; t2's change before April again: only t1's change is joined.
    answers.clear()
    env.apply([S.Insert("t2", [S.row(101, k=2, v=9, dt="2024-03-01")]), S.UpdateWhere("t1", "id", 3, {"g": "z"})])
    stream.refresh(expect="differential")
    stream.check()
    assert set(answers) == {("t2", True)}, answers
    # A change the filter keeps: differentiated, and the result still equals the recompute.
    answers.clear()
    env.apply([S.Insert("t2", [S.row(102, k=3, v=11, dt="2024-05-01")]), S.DeleteWhere("t2", "id", 4)])
    moved = stream.refresh(expect="differential")
    stream.check()
    assert set(answers) == {("t2", False)} and moved.rows_changed > 0, (answers, moved.rows_changed)
