"""engine: spark against Spark with Delta Lake: what this engine does itself (reading changes
with table_changes_by_path and snapshots with VERSION AS OF, writing the stored result with
CREATE OR REPLACE TABLE and MERGE INTO, the commit metadata and its conflicts, publishing) is
checked against the oracle; what is engine-independent (the delta rules) runs on the embedded
engine in tests/spark.
"""

from __future__ import annotations

import shutil
import threading

import pytest

from python_helpers.errors import InvalidConfig
from python_helpers.runtime.api import refresh_stream_table
from python_helpers.runtime.catalog.views import ROLE_PROPERTY, NameTaken
from python_helpers.runtime.delta.spark import sql as delta_sql
from tests.support import rotation
from tests.support import sources as S
from tests.support.harness import run_cycles
from tests.support.shapes import INITIAL, SHAPES, SMOKE_BATCHES

pytestmark = pytest.mark.spark

# One shape per way the engine's reads and writes are used: a group's stored row updated and
# deleted (aggregate), old and new snapshots of a join's other input narrowed by keys (join), a
# key-restricted recompute with materialized keys (outer join over a derived delta), a recursion
# whose step reads a changed source (its old result recomputed at old versions, its delta
# materialized before the write). The other shapes' delta rules are engine-independent and run
# on the embedded engine (tests/spark). Each refresh here costs ~8-10 s (Delta's write and its log
# reads), so make test takes them in a rotation by the day (tests/support/rotation.py).
SHAPE_NAMES = ("agg_minmax", "join_agg", "left_then_inner", "recursive_reach_counts")
AGG = "SELECT k, COUNT(*) AS n, SUM(v) AS sv FROM {src}.t1 GROUP BY k"


def _sources(env, tables=("t1", "t2", "t3")):
    for t in tables:
        env.source(t, INITIAL[t])


def _describe_detail(spark, name: str) -> dict:
    return spark.sql(f"DESCRIBE DETAIL {name}").collect()[0].asDict()


@pytest.mark.every_run  # the engine's reads and writes, a shape a day
def test_shapes_through_refresh_cycles_equal_their_recompute(delta_env, monkeypatch):
    from python_helpers.runtime.delta.spark import engine as spark_engine

    # Tidied on the way: a VACUUM at the second version (its listing in a few tasks).
    monkeypatch.setattr(spark_engine, "VACUUM_EVERY", 2)
    _sources(delta_env)
    chosen = rotation.todays(SHAPE_NAMES)
    print(f"\nspark engine shapes: {chosen} ({rotation.where()})")
    streams = [
        delta_env.stream(s.name, s.sql, engine="spark", refresh_mode="differential") for s in SHAPES if s.name in chosen
    ]
    assert len(streams) == len(chosen)
    run_cycles(delta_env, streams, SMOKE_BATCHES[:3])  # the fourth (a refill) adds no new kind of write
    for stream in streams:
        assert {r.engine for r in stream.results} == {"spark"}, stream.identifier
        assert [r.mode for r in stream.results] == ["full"] + ["differential"] * 3
    # The stored result is a Delta table in the catalog with a change feed and deletion vectors;
    # the model's name is a plain view over it (the stored rows carry bookkeeping columns).
    spark, target, name = delta_env.spark, delta_env.target, chosen[0]
    detail = _describe_detail(spark, f"{target}.__dvm_stored__{name}")
    assert detail["format"] == "delta"
    assert detail["properties"].get("delta.enableChangeDataFeed") == "true"
    assert detail["properties"].get("delta.enableDeletionVectors") == "true"
    assert spark.catalog.getTable(f"{target}.{name}").tableType == "VIEW"
    text = spark.sql(f"SHOW CREATE TABLE {target}.{name}").collect()[0][0]
    assert f"__dvm_stored__{name}" in text and "parquet." not in text.lower()
    # Each refresh commit carries its metadata: the newest names the source versions consumed.
    history = spark.sql(f"DESCRIBE HISTORY {target}.__dvm_stored__{name} LIMIT 1").collect()[0]
    assert '"offsets"' in history.userMetadata and history.operation in ("MERGE", "WRITE")
    commits = spark.sql(f"DESCRIBE HISTORY {target}.__dvm_stored__{name}").collect()
    operations = [r.operation for r in commits]
    assert "VACUUM END" in operations, operations
    # A small change replaces its keys' rows (sql.replace_keys), no MERGE; the MERGE's path is
    # the keyed result's test below.
    replaced = [
        r
        for r in commits
        if r.operation == "WRITE" and "__dvm_row_id" in (r.operationParameters or {}).get("predicate", "")
    ]
    assert replaced and "MERGE" not in operations, [(r.operation, r.operationParameters) for r in commits]
    # The history table counts each commit's rows from Delta's operation metrics: a replacement
    # of keys deletes their old rows and writes the new ones (a commit that only drops whole
    # files reports files alone).
    from python_helpers.runtime.delta.metadata import COUNTS
    from python_helpers.runtime.history import write_history

    written = write_history(spark, target, "spark")
    refreshed = []
    for stream in streams:
        rows = sorted((r for r in written if r["stream_table"] == stream.identifier), key=_version)
        assert [r["mode"] for r in rows] == ["full"] + ["differential"] * 3, rows
        assert rows[0]["rows_written"] > 0 and rows[0]["files_added"] > 0, rows[0]
        assert all(any(r[c] is not None for c in COUNTS) for r in rows[1:]), rows
        # Delta skips files itself: none counted, no read estimate.
        assert all(r["files_read"] == 0 and r["read_bytes"] is None for r in rows[1:]), rows
        refreshed += rows[1:]
    # The smoke batches update and delete: some replacement removes its keys' old rows.
    assert any(r["rows_deleted"] and r["rows_written"] for r in refreshed), refreshed


def _version(row: dict) -> int:
    return row["storage_version"]


def test_sources_with_deletion_vectors_and_column_mapping(delta_env):
    """Sources the embedded engine refuses: Spark reads them itself."""
    spark = delta_env.spark
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {delta_env.src}")
    path = delta_env.source_path("t1")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, k INT, g STRING, v INT, x DOUBLE, d DECIMAL(12,2), dt DATE) "
        "USING delta TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true', 'delta.enableDeletionVectors' = 'true', "
        "'delta.columnMapping.mode' = 'name')"
    )
    spark.sql(
        f"INSERT INTO delta.`{path}` VALUES (1, 0, 'a', 3, 1.5, 2.50, DATE'2024-01-01'), "
        "(2, 0, 'b', -1, 0.5, 1.00, NULL), (3, 1, 'a', 4, NULL, 0.10, DATE'2024-01-03'), (4, 2, NULL, NULL, 2.0, NULL, NULL)"
    )
    delta_env.paths["t1"] = path
    stream = delta_env.stream("dv_source", AGG, engine="spark")
    stream.refresh(expect="full")
    _check_by_spark(delta_env, stream, path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 2")  # a deletion vector
    spark.sql(f"UPDATE delta.`{path}` SET v = v + 10, k = 1 WHERE id = 1")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (5, 2, 'c', 7, 1.0, 3.00, DATE'2024-01-05')")
    stream.refresh(expect="differential")
    _check_by_spark(delta_env, stream, path)
    # A column the query does not read renamed (column mapping: names only) after a change: Delta
    # reads no change across it, so the refresh is full, saying why; then differential again.
    spark.sql(f"UPDATE delta.`{path}` SET v = v - 1 WHERE id = 3")
    spark.sql(f"ALTER TABLE delta.`{path}` RENAME COLUMN g TO grp")
    result = stream.refresh(expect="full")
    assert "schema changed" in (result.reason or ""), result.reason
    _check_by_spark(delta_env, stream, path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 4")
    stream.refresh(expect="differential")
    _check_by_spark(delta_env, stream, path)


def _check_by_spark(env, stream, path: str) -> None:
    """The oracle for a source the deltalake package cannot read (deletion vectors): the query
    recomputed by Spark on the source as it is now."""
    from tests.support.oracle import compare_rows

    got = env.spark.table(stream.view).collect()
    want = env.spark.sql(stream.sql.replace(f"{env.src}.t1", f"delta.`{path}`")).collect()
    comparison = compare_rows(got, want)
    assert comparison.ok, comparison.describe()


def test_a_refresh_racing_another_starts_over_and_nothing_is_applied_twice(delta_env, monkeypatch):
    """Two refreshes of one stream table read the same stored version (held together at the
    step after planning) and both commit: Delta's conflict check makes one start over."""
    from python_helpers.runtime.refresh import steps

    _sources(delta_env, ("t1",))
    stream = delta_env.stream("raced", AGG, engine="spark")
    stream.refresh(expect="full")
    delta_env.apply([S.Insert("t1", [S.row(100, k=1, v=5), S.row(101, k=9, v=1)]), S.DeleteRows("t1", [0])])
    together = threading.Barrier(2, timeout=120)
    arrivals = iter(range(1000))
    reached = steps.reached

    def hold(name):
        if name == "planned" and next(arrivals) < 2:  # the first attempt of each: held together
            together.wait()
        reached(name)

    monkeypatch.setattr(steps, "reached", hold)
    said: list = []
    results: list = []
    errors: list = []

    def refresh():
        try:
            results.append(refresh_stream_table(delta_env.spark, stream.request(), log=lambda lvl, t: said.append(t)))
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=refresh) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 2, errors
    assert any("starting over" in t for t in said), said
    stream.check()


def test_rows_changed_by_hand_in_the_stored_table_are_rebuilt(delta_env):
    _sources(delta_env, ("t1",))
    stream = delta_env.stream("by_hand", AGG, engine="spark")
    stream.refresh(expect="full")
    delta_env.spark.sql(f"DELETE FROM {delta_env.target}.__dvm_stored__by_hand WHERE k = 1")
    delta_env.apply([S.Insert("t1", [S.row(100, k=2, v=5)])])
    result = stream.refresh(expect="full")
    assert "changed outside dbt-spark-stream" in result.reason and "DELETE" in result.reason
    stream.check()
    delta_env.apply([S.Insert("t1", [S.row(101, k=2, v=1)])])
    stream.refresh(expect="differential")
    stream.check()


def test_a_table_of_someone_else_at_the_stored_name_is_left_alone(delta_env):
    _sources(delta_env, ("t1",))
    spark, target = delta_env.spark, delta_env.target
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {target}")
    spark.sql(f"CREATE TABLE {target}.__dvm_stored__in_the_way USING delta AS SELECT 1 AS mine")
    stream = delta_env.stream("in_the_way", AGG, engine="spark")
    with pytest.raises(NameTaken, match="in_the_way.*not this stream table's stored result.*drop or rename"):
        stream.refresh()
    assert spark.table(f"{target}.__dvm_stored__in_the_way").collect() == [(1,)]


def test_a_source_view_the_catalog_shows_is_left_and_a_dropped_one_made_again(delta_env, monkeypatch, tmp_path):
    """A source view's text never changes: a later full refresh that finds it in the catalog as
    published looks its name up once and changes nothing. Dropped meanwhile, it is made again by
    the next full refresh, and by the next differential one (which finds it missing)."""
    import json

    _sources(delta_env, ("t1",))
    spark, view = delta_env.spark, f"{delta_env.src}.t1"
    first = delta_env.stream("once_a", AGG, engine="spark")
    first.refresh(expect="full")
    assert spark.catalog.tableExists(view)
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv("DBT_SPARK_STREAM_TRACE", str(trace))
    delta_env.stream("once_b", AGG, engine="spark").refresh(expect="full")
    calls = [json.loads(line) for line in trace.read_text().splitlines()]
    assert any(c["text"].startswith("CREATE OR REPLACE TABLE") for c in calls), calls  # traced
    # Catalog statements name the schema quoted; reads name the source's path.
    on_source = [c["text"] for c in calls if f"`{delta_env.src}`" in c["text"]]
    assert on_source == [f"SHOW TABLE EXTENDED IN `{delta_env.src}` LIKE 't1'"], on_source
    spark.sql(f"DROP VIEW {view}")
    first.refresh(expect="full", full_refresh=True)
    assert spark.catalog.tableExists(view)
    spark.sql(f"DROP VIEW {view}")
    delta_env.apply([S.Insert("t1", [S.row(100, k=2, v=5)])])
    first.refresh(expect="differential")
    assert spark.catalog.tableExists(view)
    first.check()


def test_a_column_added_to_a_source_shows_by_the_sources_name(delta_env):
    """A source view's columns follow its Delta table (WITH SCHEMA EVOLUTION): a column added to
    the source shows by its name at once, without a refresh. A view made the way an earlier
    release made it (Spark's default mode: the columns it was made with) is switched by the next
    full refresh, which otherwise leaves a source view with this text alone."""
    _sources(delta_env, ("t1",))
    spark, view, path = delta_env.spark, f"{delta_env.src}.t1", delta_env.paths["t1"]
    stream = delta_env.stream("follows", AGG, engine="spark")
    stream.refresh(expect="full")
    spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (extra INT)")
    assert "extra" in spark.table(view).columns
    spark.sql(f"DROP VIEW {view}")
    spark.sql(f"CREATE VIEW {view} TBLPROPERTIES ('{ROLE_PROPERTY}' = 'source') AS SELECT * FROM delta.`{path}`")
    spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (more INT)")
    assert "more" not in spark.table(view).columns  # as made
    stream.refresh(expect="full", full_refresh=True)
    assert {"extra", "more"} <= set(spark.table(view).columns)
    spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (last INT)")
    assert "last" in spark.table(view).columns
    stream.check()


def test_a_vacuumed_change_is_rebuilt_and_says_why(delta_env):
    _sources(delta_env, ("t1",))
    stream = delta_env.stream("vacuumed_src", AGG, engine="spark")
    stream.refresh(expect="full")
    path = delta_env.paths["t1"]
    delta_env.apply([S.DeleteRows("t1", [0, 1]), S.Insert("t1", [S.row(100, k=1, v=5)])])
    spark = delta_env.spark
    spark.sql("SET spark.databricks.delta.retentionDurationCheck.enabled = false")
    # its listing in 10,000 tasks by default: 40 s of this test on two cores
    spark.sql(f"SET {delta_sql.LISTING_PARALLELISM} = 2")
    try:
        spark.sql(f"VACUUM delta.`{path}` RETAIN 0 HOURS")
    finally:
        spark.sql("RESET spark.databricks.delta.retentionDurationCheck.enabled")
        spark.sql(f"RESET {delta_sql.LISTING_PARALLELISM}")
    result = stream.refresh(expect="full")
    assert "can no longer be read" in result.reason, result.reason
    stream.check()


def test_a_stream_table_over_a_stream_table_reads_its_change_feed(delta_env, monkeypatch):
    """...and engine: auto picks the spark engine where Spark has Delta Lake."""
    from python_helpers.runtime.delta.spark import engine as spark_engine
    from python_helpers.runtime.delta.spark import identity

    asked: list = []  # the locations DESCRIBE DETAIL is run on
    detail = spark_engine.SparkDelta._detail
    monkeypatch.setattr(
        spark_engine.SparkDelta, "_detail", lambda self, at, fresh=False: asked.append(at) or detail(self, at, fresh)
    )
    _sources(delta_env, ("t1",))
    upstream = delta_env.stream("upstream", AGG, engine="auto")
    assert upstream.refresh(expect="full").engine == "spark"
    downstream = delta_env.stream(
        "downstream",
        f"SELECT n, COUNT(*) AS groups FROM {delta_env.target}.upstream GROUP BY n",
        oracle_sql="SELECT n, COUNT(*) AS groups FROM (" + AGG + ") GROUP BY n",
        engine="spark",
    )
    downstream.refresh(expect="full")
    downstream.check()
    delta_env.apply([S.Insert("t1", [S.row(100, k=1, v=5), S.row(101, k=7, v=2)]), S.DeleteRows("t1", [2])])
    for i in range(16):  # more commits than a pin reads (RECENT_COMMITS): its history is read back
        delta_env.apply([S.Insert("t1", [S.row(200 + i, k=i % 3, v=i)])])
    # As in a new dbt process, nothing remembered: the stored metadata's offsets say what the
    # last refresh knew of each source, and the history shows it still holds (no DESCRIBE DETAIL).
    identity._seen.clear()
    asked.clear()
    assert upstream.refresh(expect="differential").engine == "spark"
    downstream.refresh(expect="differential")
    downstream.check()
    assert not [a for a in asked if "t1" in a or "upstream" in a], asked
    # A table made anew keeps no id (identity.py remembers them: it must see that): the
    # upstream's --full-refresh is a CREATE OR REPLACE (a new id in the same log), its source a
    # new log at the same place.
    upstream.refresh(expect="full", full_refresh=True)
    result = downstream.refresh(expect="full")
    assert "recreated" in result.reason, result.reason
    downstream.check()
    shutil.rmtree(delta_env.paths["t1"])
    S.create_source(delta_env.paths["t1"], INITIAL["t1"][:4])
    result = upstream.refresh(expect="full")
    assert "recreated" in result.reason, result.reason
    upstream.check()


def test_the_spark_engine_needs_delta_lake_in_spark(env):
    """The pytest process's own Spark has no Delta Lake: engine: spark says what to do."""
    env.source("t1", INITIAL["t1"])
    stream = env.stream("no_delta_lake", AGG, engine="spark")
    with pytest.raises(InvalidConfig) as info:
        stream.refresh()
    text = str(info.value)
    assert stream.model in text and "Delta Lake" in text and "engine: embedded" in text


def test_a_keyed_result_merges_per_key_and_refuses_a_second_row_of_a_key(delta_env, monkeypatch):
    """unique_key on the spark engine: the MERGE rows per key applied by Delta's MERGE INTO (the
    paths of a change of more rows or keys than a replace by row ids takes, made the rule here: the
    first refresh MERGEs the query's rows directly, the second its rows computed first), and the
    key's check (raise_error) stopping the refresh before its commit."""
    from deltalake import DeltaTable

    from python_helpers.runtime.delta.spark import engine as spark_engine

    monkeypatch.setattr(spark_engine, "REPLACE_KEYS_MIN", 0)
    monkeypatch.setattr(spark_engine, "REPLACE_KEYS_MAX", 0)
    monkeypatch.setattr(spark_engine, "SMALL_CHANGE_ROWS", 0)

    from python_helpers.errors import UniqueKeyViolated
    from python_helpers.runtime.delta.locations import storage_path
    from tests.spark.test_unique_key import BATCHES, SHAPES, T1, T2

    delta_env.source("t1", T1)
    delta_env.source("t2", T2)
    sql, key = SHAPES["keyed_fact"]
    stream = delta_env.stream("keyed_fact", sql, engine="spark", unique_key=key)
    run_cycles(delta_env, [stream], BATCHES[:1])
    monkeypatch.setattr(spark_engine, "SMALL_CHANGE_ROWS", 10**9)
    delta_env.apply(BATCHES[1])
    stream.refresh(expect="differential")
    stream.check()
    assert [r.mode for r in stream.results] == ["full", "differential", "differential"]
    stored = f"{delta_env.target}.__dvm_stored__keyed_fact"
    # The query's columns alone (a key of one integer column is listed as it is), one row per key.
    assert delta_env.spark.table(stored).columns == delta_env.spark.table(stream.view).columns
    total, distinct = delta_env.spark.sql(f"SELECT count(*), count(DISTINCT id) FROM {stored}").collect()[0]
    assert total == distinct
    operations = [r.operation for r in delta_env.spark.sql(f"DESCRIBE HISTORY {stored}").collect()]
    assert operations.count("MERGE") == 2, operations
    location = storage_path(delta_env.spark, delta_env.target, "keyed_fact")
    version = DeltaTable(location).version()
    # Two new rows of one key, both joining t2's id 2: a second row of key 50.
    delta_env.apply([S.Insert("t1", [S.row(50, 2, "z", 1), S.row(50, 2, "y", 2)])])
    with pytest.raises(UniqueKeyViolated, match=r"unique_key \(id\) is not unique"):
        stream.refresh()
    assert DeltaTable(location).version() == version, "nothing is committed"


def test_a_keyed_result_replaces_its_keys_rows_by_one_column_a_null_in_the_key_too(delta_env):
    """With the engine's own thresholds: a small change to a keyed result replaces its keys' rows
    by one column (sql.replace_keys: Delta's REPLACE WHERE takes filters of one column): a key
    of one integer column by its values, a key of two, which holds NULL where a t1 row meets no
    t2 row, by its row id (the key's text spells NULL out, so IN finds it). The first two
    batches whenever the test runs (the second makes NULL keys by deleting a t2 row); each of the
    other two on one day of make test's rotation and neither on the others: make test's budget
    (each batch is two refreshes of the spark engine, 20-70 s; the test took 132-255 s with one
    of them). The test itself is in make test's hourly share."""
    from tests.spark.test_unique_key import BATCHES, SHAPES, T1, T2

    later = rotation.todays(BATCHES[2:], every_day=False)
    batches = BATCHES[:2] + later

    delta_env.source("t1", T1)
    delta_env.source("t2", T2)
    streams = [
        delta_env.stream(name, SHAPES[name][0], engine="spark", unique_key=SHAPES[name][1])
        for name in ("keyed_fact", "keyed_nullable")
    ]
    run_cycles(delta_env, streams, BATCHES[:2])
    # The second batch deleted a t2 row that t1 rows met: their keys hold NULL now (checked here:
    # the third batch empties t1, so after it none would be left to tell).
    nulls = delta_env.spark.sql(f"SELECT count(*) FROM {streams[1].view} WHERE b_id IS NULL").collect()[0][0]
    assert nulls > 0, "the NULL key is exercised"
    for batch in later:
        delta_env.apply(batch)
        for stream in streams:
            stream.refresh(expect="differential")
            stream.check()
    for stream in streams:
        assert [r.mode for r in stream.results] == ["full"] + ["differential"] * len(batches), stream.identifier
    history = {
        name: delta_env.spark.sql(f"DESCRIBE HISTORY {delta_env.target}.__dvm_stored__{name}").collect()
        for name in ("keyed_fact", "keyed_nullable")
    }
    for name, listed in (("keyed_fact", "id IN ("), ("keyed_nullable", "__dvm_row_id IN (")):
        replaced = [r for r in history[name] if r.operation == "WRITE" and listed in _predicate(r)]
        assert replaced, [(r.operation, r.operationParameters) for r in history[name]]
        assert "MERGE" not in [r.operation for r in history[name]], name
    columns = delta_env.spark.table(f"{delta_env.target}.__dvm_stored__keyed_fact").columns
    assert "__dvm_row_id" not in columns, columns


def _predicate(commit) -> str:
    return str((commit.operationParameters or {}).get("predicate", ""))
