"""Data safety: what a refresh must never do to a user's tables and results.

Each test names the hazard it guards against. All of them run real refreshes on real Delta
tables in the session's Spark and check the stream table against its recompute (the oracle).
"""

from __future__ import annotations

import decimal
import os
import threading

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from python_helpers.errors import SourceBehind, StreamTableError
from python_helpers.runtime.api import refresh_stream_table
from python_helpers.runtime.catalog import views as catalog_views
from python_helpers.runtime.connections.base import as_connection
from python_helpers.runtime.delta.embedded import change_feed, publishing, storage
from python_helpers.runtime.delta.embedded import generations as published_files
from python_helpers.runtime.delta.locations import storage_path
from tests.support import sources as S

pytestmark = pytest.mark.spark

AGG = "SELECT k, COUNT(*) AS n, SUM(v) AS sv FROM {src}.t1 GROUP BY k"
ROWS = [S.row(i, k=i % 3, g="abc"[i % 3], v=i, x=i / 2, d=i, dt="2024-01-01") for i in range(1, 10)]


def _count_rows(path: str) -> int:
    return DeltaTable(path).to_pyarrow_table().num_rows


# --- 1. a user's table is never dropped ----------------------------------------------------------


def test_a_managed_table_registered_at_the_source_name_keeps_its_data(env):
    """The catalog holds a managed table `src.t1` whose location is where the Delta source is:
    publishing the source's view used to DROP TABLE it, deleting the directory and the data."""
    env.spark.sql(f"CREATE DATABASE IF NOT EXISTS {env.src}")
    env.spark.sql(f"CREATE TABLE {env.src}.t1 (id BIGINT, k INT) USING parquet")
    location = env.spark.sql(f"DESCRIBE TABLE EXTENDED {env.src}.t1").where("col_name = 'Location'").collect()[0][1]
    path = location.replace("file:", "")
    assert os.path.abspath(path) == os.path.abspath(env.source_path("t1"))
    env.source("t1", ROWS)
    said = []
    stream = env.stream("over_managed", AGG)
    result = refresh_stream_table(env.spark, stream.request(), log=lambda level, text: said.append(text))
    assert result.mode == "full"
    stream.check()
    assert env.spark.catalog.tableExists(f"{env.src}.t1")
    assert env.spark.catalog.getTable(f"{env.src}.t1").tableType == "MANAGED"
    assert _count_rows(env.paths["t1"]) == len(ROWS)  # the data is all there
    assert any("did not create" in t and f"{env.src}.t1" in t for t in said), said
    env.apply([S.Insert("t1", [S.row(50, k=1, v=5)])])
    stream.refresh(expect="differential")
    stream.check()
    assert _count_rows(env.paths["t1"]) == len(ROWS) + 1


def test_an_external_table_at_the_source_name_stays_registered_and_readable(env, tmp_path):
    elsewhere = tmp_path / "external"
    env.spark.sql(f"CREATE DATABASE IF NOT EXISTS {env.src}")
    env.spark.range(3).write.parquet(str(elsewhere))
    env.spark.sql(f"CREATE TABLE {env.src}.t1 USING parquet LOCATION '{elsewhere}'")
    env.source("t1", ROWS)
    stream = env.stream("over_external", AGG)
    stream.refresh(expect="full")
    stream.check()
    assert env.spark.catalog.getTable(f"{env.src}.t1").tableType == "EXTERNAL"
    assert env.spark.table(f"{env.src}.t1").count() == 3


def test_a_view_of_the_users_at_the_source_name_is_left_as_it_is(env):
    env.spark.sql(f"CREATE DATABASE IF NOT EXISTS {env.src}")
    env.spark.sql(f"CREATE VIEW {env.src}.t1 AS SELECT 42 AS answer")
    env.source("t1", ROWS)
    stream = env.stream("over_user_view", AGG)
    stream.refresh(expect="full")
    stream.check()
    env.apply([S.DeleteRows("t1", [0])])
    stream.refresh(expect="differential")
    stream.check()
    assert [tuple(r) for r in env.spark.table(f"{env.src}.t1").collect()] == [(42,)]


def test_a_table_at_the_stream_tables_name_is_refused_not_replaced(env):
    from python_helpers.runtime.catalog.views import NameTaken

    env.source("t1", ROWS)
    env.spark.sql(f"CREATE TABLE {env.target}.taken USING parquet AS SELECT 1 AS precious")
    stream = env.stream("taken", AGG)
    with pytest.raises(NameTaken, match="did not create") as caught:
        stream.refresh()
    assert "taken" in str(caught.value)
    assert [tuple(r) for r in env.spark.table(f"{env.target}.taken").collect()] == [(1,)]


def test_a_view_at_the_stream_tables_name_is_taken_over_only_when_the_caller_owns_the_name(env):
    from python_helpers.runtime.catalog.views import NameTaken

    env.source("t1", ROWS)
    env.spark.sql(f"CREATE VIEW {env.target}.was_a_view AS SELECT 1 AS old")
    stream = env.stream("was_a_view", AGG)
    with pytest.raises(NameTaken):
        stream.refresh()
    stream.refresh(expect="full", take_over_relation=True)  # dbt owns its model's name
    stream.check()
    props = dict((r[0], r[1]) for r in env.spark.sql(f"SHOW TBLPROPERTIES {stream.view}").collect())
    assert props[catalog_views.ROLE_PROPERTY] == catalog_views.STREAM_TABLE
    env.apply([S.Insert("t1", [S.row(51, k=2, v=1)])])
    stream.refresh(expect="differential")
    stream.check()


def test_a_fresh_process_alters_its_own_view_at_once_and_refuses_a_table_put_in_its_place(env):
    """A refresh in a new process (nothing remembered in memory) whose marker says it published
    the view alters it without asking the catalog first; a table the user created at that name
    meanwhile makes that fail, and the refresh then refuses the name and leaves the table."""
    from python_helpers.runtime.catalog.views import NameTaken

    env.source("t1", ROWS)
    stream = env.stream("fresh_process", AGG, take_over_relation=True)
    stream.refresh(expect="full")
    conn = as_connection(env.spark)
    catalog_views.forget(conn)  # as a new dbt process starts
    env.apply([S.Insert("t1", [S.row(60, k=1, v=3)])])
    stream.refresh(expect="differential")
    stream.check()
    props = dict((r[0], r[1]) for r in env.spark.sql(f"SHOW TBLPROPERTIES {stream.view}").collect())
    assert props[catalog_views.ROLE_PROPERTY] == catalog_views.STREAM_TABLE
    env.spark.sql(f"DROP VIEW {stream.view}")
    env.spark.sql(f"CREATE TABLE {stream.view} USING parquet AS SELECT 7 AS precious")
    catalog_views.forget(conn)
    env.apply([S.Insert("t1", [S.row(61, k=2, v=4)])])
    with pytest.raises(NameTaken, match="did not create"):
        stream.refresh()
    assert [tuple(r) for r in env.spark.table(stream.view).collect()] == [(7,)]


def test_a_metastore_restored_from_a_backup_is_published_again_not_trusted(env):
    """The markers live in storage, the views in the metastore: a metastore restored from a
    backup holds the views of an older refresh while the markers say the newest is published.
    A refresh with nothing to do checks the views' texts against the markers and publishes
    the stream table's and the source's views again (failed before: skipped, old rows shown)."""
    env.source("t1", ROWS)
    stream = env.stream("restored", AGG)
    stream.refresh(expect="full")
    catalog = catalog_views.Catalog(as_connection(env.spark))
    backup = {v: catalog.view_text(*v.split(".")) for v in (stream.view, f"{env.src}.t1")}
    assert all(backup.values()), backup
    env.apply([S.Insert("t1", [S.row(70, k=1, v=9), S.row(71, k=2, v=5)]), S.DeleteRows("t1", [0])])
    stream.refresh(expect="differential")
    stream.check()
    conn = as_connection(env.spark)
    for view, text in backup.items():  # the restore: the views' texts of the first build
        env.spark.sql(f"ALTER VIEW {view} AS {text}")
    catalog_views.forget(conn)  # a new dbt process after the restore
    result = stream.refresh(expect="differential")
    assert result.skipped and result.rows_changed == 0  # nothing to commit, only the views
    stream.check()
    assert env.spark.table(f"{env.src}.t1").count() == len(ROWS) + 1  # the source's view too


def _information(env, name: str) -> str:
    """The view as dbt's relation cache describes it (dbt-spark lists a schema with this)."""
    rows = env.spark.sql(f"SHOW TABLE EXTENDED IN {env.target} LIKE '{name}'").collect()
    return rows[0].information


def test_a_view_dbt_saw_at_the_current_generation_is_not_read_again_and_a_stale_one_is_republished(env, monkeypatch):
    """A refresh with nothing to do compares its view with what dbt's relation cache read at the
    start of the run instead of asking the catalog again; a description that shows an older
    generation than the marker (a metastore restored before the run) is not trusted."""
    env.source("t1", ROWS)
    stream = env.stream("hinted", AGG)
    stream.refresh(expect="full")
    conn = as_connection(env.spark)
    before = _information(env, "hinted")
    env.apply([S.Insert("t1", [S.row(80, k=1, v=9)])])
    stream.refresh(expect="differential")
    old_text = catalog_views.view_text_of(before)
    assert old_text and old_text not in _information(env, "hinted")
    env.spark.sql(f"ALTER VIEW {stream.view} AS {old_text}")  # the restore
    catalog_views.forget(conn)  # a new dbt process
    result = stream.refresh(expect="differential", catalog_information=before)
    assert result.skipped and result.rows_changed == 0
    stream.check()  # published again: the inserted row is shown

    asked: list = []
    describe = catalog_views.Catalog.describe

    def counted(self, schema, names):
        names = list(names)
        asked.append((schema, names))
        return describe(self, schema, names)

    monkeypatch.setattr(catalog_views.Catalog, "describe", counted)
    catalog_views.forget(conn)
    result = stream.refresh(expect="differential", catalog_information=_information(env, "hinted"))
    assert result.skipped
    assert asked == [(env.src, ["t1"])]  # the source's view in one statement, the model's not at all
    stream.check()


JOIN3 = (
    "SELECT a.k, COUNT(*) AS n, SUM(b.v) AS sv FROM {src}.t1 a JOIN {src}.t2 b ON a.k = b.k "
    "JOIN {src}.t3 c ON b.k = c.k GROUP BY a.k"
)


def test_a_new_process_looks_its_source_views_up_in_one_statement_and_again_when_that_answer_went_stale(
    env, monkeypatch
):
    """A refresh in a new process asks the catalog about the source views of one schema in one
    statement (it asked once per source: a round trip each over Spark Connect). Its answer is
    used once: a view dropped after it is created again. The stream table matches its recompute
    and every source view shows its source's newest row."""
    for name in ("t1", "t2", "t3"):
        env.source(name, ROWS)
    stream = env.stream("batched", JOIN3)
    stream.refresh(expect="full")
    conn = as_connection(env.spark)
    asked: list = []
    describe, remember = catalog_views.Catalog.describe, catalog_views.Catalog.remember

    def counted(self, schema, names):
        names = list(names)
        asked.append((schema, sorted(names)))
        return describe(self, schema, names)

    def then_dropped(self, schema, names):
        remember(self, schema, names)
        env.spark.sql(f"DROP VIEW {env.src}.t2")  # after the lookup, before its DDL

    monkeypatch.setattr(catalog_views.Catalog, "describe", counted)
    catalog_views.forget(conn)  # a new dbt process
    env.apply([S.Insert(n, [S.row(90 + i, k=1, v=5)]) for i, n in enumerate(("t1", "t2"))])
    stream.refresh(expect="differential")
    stream.check()
    assert [a for a in asked if a[0] == env.src] == [(env.src, ["t1", "t2", "t3"])]

    monkeypatch.setattr(catalog_views.Catalog, "remember", then_dropped)
    catalog_views.forget(conn)
    env.apply([S.Insert(n, [S.row(95 + i, k=2, v=6)]) for i, n in enumerate(("t1", "t2", "t3"))])
    stream.refresh(expect="differential")
    stream.check()
    for i, name in enumerate(("t1", "t2", "t3")):  # each view shows its newest row
        got = env.spark.sql(f"SELECT COUNT(*) FROM {env.src}.{name} WHERE id = {95 + i}").collect()[0][0]
        assert got == 1, name


def test_the_catalog_describes_several_objects_of_a_schema_in_one_statement(env):
    """Views, tables, a name nobody has and a session's temporary view of a listed name, as
    Spark's own `SHOW TABLE EXTENDED` answers them (a property value with a comma included)."""
    spark = env.spark
    t = env.target
    spark.sql(f"CREATE VIEW {t}.ours TBLPROPERTIES ('{catalog_views.ROLE_PROPERTY}' = 'source') AS SELECT 1 AS a")
    spark.sql(f"CREATE VIEW {t}.theirs TBLPROPERTIES ('owner_team' = 'x, y') AS SELECT 2 AS b")
    spark.sql(f"CREATE TABLE {t}.plain_table (a INT) USING parquet")
    spark.sql("CREATE OR REPLACE TEMP VIEW nobody AS SELECT 4 AS d")
    statements: list = []
    conn = as_connection(spark)
    rows = conn.rows

    class Counted:
        def __getattr__(self, name):
            return getattr(conn, name)

        def rows(self, sql):
            statements.append(sql)
            return rows(sql)

    described = catalog_views.Catalog(Counted()).describe(t, ["ours", "theirs", "plain_table", "nobody"])
    assert len(statements) == 1, statements
    assert described["ours"].role == "source" and "SELECT 1 AS a" in described["ours"].text
    assert described["theirs"].role is None and "SELECT 2 AS b" in described["theirs"].text
    assert described["plain_table"] is not None and described["plain_table"].text is None
    assert described["nobody"] is None  # only the session's temporary view has that name
    assert catalog_views.Catalog(conn).describe(f"{t}_missing", ["ours"]) == {"ours": None}
    spark.sql("DROP VIEW IF EXISTS nobody")


# --- 2. a column's type changed in place ---------------------------------------------------------


def _overwrite_with(path, transform):
    data = DeltaTable(path).to_pyarrow_table()
    data = transform(data)
    write_deltalake(path, data, mode="overwrite", schema_mode="overwrite")


def _retyped(data: pa.Table, name: str, type_: pa.DataType) -> pa.Table:
    i = data.schema.get_field_index(name)
    return data.set_column(i, pa.field(name, type_), data.column(name).cast(type_))


@pytest.mark.parametrize(
    "column, new_type, sql",
    [
        ("k", pa.int64(), "SELECT k, COUNT(*) AS n FROM {src}.t1 GROUP BY k"),  # a group key
        ("k", pa.float64(), "SELECT k, v FROM {src}.t1"),  # an output column of a bag
        ("d", pa.decimal128(14, 4), "SELECT g, SUM(d) AS sd FROM {src}.t1 GROUP BY g"),  # a decimal's scale
    ],
)
def test_a_type_changed_in_place_rebuilds_with_the_reason(env, column, new_type, sql):
    env.source("t1", ROWS)
    stream = env.stream(f"retyped_{column}", sql)
    stream.refresh(expect="full")
    _overwrite_with(env.paths["t1"], lambda data: _retyped(data, column, new_type))
    result = stream.refresh(expect="full")
    assert f"column {column} of source" in result.reason and "changed type" in result.reason, result.reason
    stream.check()
    env.apply([S.Insert("t1", [S.row(60, k=1, v=3, d=2)])], only_existing=True)
    stream.refresh(expect="differential")
    stream.check()


def test_state_kept_by_another_plan_of_the_query_is_rebuilt_not_merged_into(env, monkeypatch):
    """A release that maintains a query another way (GROUPING SETS as one aggregate over an
    expansion, COUNT(DISTINCT x) over distinct pairs) keeps other state under the same column
    names: merging the new delta rules into the old state would publish wrong rows. The plan's
    digest in the stored metadata makes the next refresh rebuild once, then go on differentially."""
    from python_helpers.runtime.refresh import differential

    env.source("t1", ROWS)
    stream = env.stream(
        "replanned", "SELECT g, COUNT(DISTINCT k) AS dk, COUNT(*) AS n FROM {src}.t1 GROUP BY ROLLUP(g)"
    )
    stream.refresh(expect="full")
    env.apply([S.Insert("t1", [S.row(70, k=5, g="a", v=1)])], only_existing=True)
    real = differential.plan_digest
    monkeypatch.setattr(differential, "plan_digest", lambda result: "aggregate:kept-by-an-older-release")
    result = stream.refresh(expect="full")
    assert "maintains the query with another plan" in result.reason, result.reason
    stream.check()
    monkeypatch.setattr(differential, "plan_digest", real)
    env.apply([S.DeleteRows("t1", [0]), S.Insert("t1", [S.row(71, k=6, g="b", v=2)])], only_existing=True)
    stream.refresh(expect="differential")
    stream.check()


def test_a_string_column_becoming_a_date_rebuilds(env):
    schema = pa.schema([("id", pa.int64()), ("day", pa.string())])
    path = env.source_path("days")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_deltalake(
        path,
        pa.Table.from_pylist([{"id": 1, "day": "2024-01-02"}, {"id": 2, "day": "2024-01-03"}], schema=schema),
        configuration=S.CDF_ON,
    )
    env.paths["days"] = path
    stream = env.stream("days", "SELECT day, COUNT(*) AS n FROM {src}.days GROUP BY day")
    stream.refresh(expect="full")
    _overwrite_with(path, lambda data: _retyped(data, "day", pa.date32()))
    result = stream.refresh(expect="full")
    assert "changed type from string to date" in result.reason
    stream.check()


# --- 3. a crash after the commit, before the views ------------------------------------------------


class Crash(RuntimeError):
    pass


@pytest.mark.parametrize("where", ["before the views", "between the view and its marker"])
def test_a_crash_after_the_commit_is_repaired_by_the_next_run_even_without_source_changes(env, monkeypatch, where):
    env.source("t1", ROWS)
    stream = env.stream("crash_publish", AGG)
    stream.refresh(expect="full")
    env.apply([S.Insert("t1", [S.row(70, k=1, v=100)]), S.DeleteRows("t1", [2])])
    with monkeypatch.context() as patch:
        if where == "before the views":
            patch.setattr(publishing, "publish", lambda *a, **k: (_ for _ in ()).throw(Crash(where)))
        else:
            real = published_files.write_marker

            def crash_on_stream_marker(root, marker, catalog="default"):
                if published_files.PUBLISHED_DIR in root and published_files.SOURCES_DIR not in root:
                    raise Crash(where)
                return real(root, marker, catalog)

            patch.setattr(published_files, "write_marker", crash_on_stream_marker)
        with pytest.raises(Crash):
            stream.refresh()
    catalog_views.forget(as_connection(env.spark))  # a new process knows nothing of what this one published
    result = stream.refresh(expect="differential")  # no source moved since the commit
    assert result.rows_changed == 0
    stream.check()


# --- 5. settings that change results ------------------------------------------------------------


def test_a_session_time_zone_change_rebuilds_with_the_setting_named(env):
    ts_schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))])
    path = env.source_path("events")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    import datetime

    rows = [
        {"id": i, "ts": datetime.datetime(2024, 1, 1, 21 + i % 3, 30, tzinfo=datetime.timezone.utc)} for i in range(6)
    ]
    write_deltalake(path, pa.Table.from_pylist(rows, schema=ts_schema), configuration=S.CDF_ON)
    env.paths["events"] = path
    stream = env.stream("per_day", "SELECT to_date(ts) AS day, COUNT(*) AS n FROM {src}.events GROUP BY to_date(ts)")
    spark = env.spark
    before = spark.conf.get("spark.sql.session.timeZone")
    try:
        stream.refresh(expect="full")
        spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
        result = stream.refresh(expect="full")
        assert "spark.sql.session.timeZone changed from UTC to Asia/Tokyo" in result.reason, result.reason
        stream.check()
        write_deltalake(path, pa.Table.from_pylist([rows[0]], schema=ts_schema), mode="append")
        stream.refresh(expect="differential")
        stream.check()
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)


def test_reading_literals_another_way_rebuilds_with_the_setting_named(env):
    """spark.sql.parser.escapedStringLiterals changes what '\\t' in the model's SQL means."""
    env.source("t1", ROWS)
    stream = env.stream("literals", "SELECT k, concat(g, '\\t') AS tagged FROM {src}.t1")
    spark = env.spark
    stream.refresh(expect="full")
    try:
        spark.conf.set("spark.sql.parser.escapedStringLiterals", "true")
        result = stream.refresh(expect="full")
        assert "spark.sql.parser.escapedStringLiterals changed from false to true" in result.reason, result.reason
        stream.check()
    finally:
        spark.conf.unset("spark.sql.parser.escapedStringLiterals")


# --- 6. source versions never move backwards --------------------------------------------------------


def test_a_source_log_that_went_back_is_an_error_and_changes_nothing(env):
    env.source("t1", ROWS)
    stream = env.stream("went_back", AGG)
    stream.refresh(expect="full")
    env.apply([S.Insert("t1", [S.row(80, k=1, v=1)])])
    env.apply([S.Insert("t1", [S.row(81, k=2, v=2)])])
    stream.refresh(expect="differential")
    target = storage_path(env.spark, env.target, stream.identifier)
    before = storage.read_metadata(target)
    log_dir = os.path.join(env.paths["t1"], "_delta_log")
    newest = sorted(f for f in os.listdir(log_dir) if f.endswith(".json"))[-1]
    os.remove(os.path.join(log_dir, newest))  # the log now ends one version earlier (same table)
    with pytest.raises(SourceBehind, match="already consumed") as caught:
        stream.refresh()
    assert stream.model in str(caught.value) and "--full-refresh" in str(caught.value)
    after = storage.read_metadata(target)
    assert after["storage_version"] == before["storage_version"]  # nothing written


def test_a_rival_refresh_between_reading_the_stored_state_and_pinning_makes_it_start_over(env, monkeypatch):
    """A rival refresh commits newer source versions after this one read the stored metadata and
    before it pinned its sources: this one's commit loses (start over), nothing is applied twice,
    and the source is not taken for one that went back."""
    from python_helpers.runtime.refresh import run as refresh_run

    env.source("t1", ROWS)
    stream = env.stream("overtaken", AGG)
    stream.refresh(expect="full")
    env.apply([S.Insert("t1", [S.row(82, k=1, v=4)])])
    plan_request = refresh_run.plan_request
    rival_done: list = []

    def rival_then_plan(delta, request):
        if not rival_done:
            rival_done.append(True)
            env.apply([S.Insert("t1", [S.row(83, k=3, v=5)]), S.DeleteRows("t1", [0])])
            refresh_stream_table(env.spark, stream.request())  # commits the newer source version
        return plan_request(delta, request)

    monkeypatch.setattr(refresh_run, "plan_request", rival_then_plan)
    said: list = []
    result = refresh_stream_table(env.spark, stream.request(), log=lambda level, text: said.append(text))
    assert any("starting over" in t and "nothing was applied" in t for t in said), said
    assert result.skipped  # the rival already consumed everything
    stream.check()


# --- 7. a huge change is counted before anything is read ---------------------------------------------


def test_a_large_change_is_judged_from_the_log_before_it_is_read(env, monkeypatch):
    env.source("t1", [S.row(i, k=i % 5, v=i % 7) for i in range(12_000)])
    stream = env.stream("large", AGG, auto_full_threshold=0.2)
    stream.refresh(expect="full")
    env.apply(
        [
            S.UpdateWhere("t1", "k", 1, {"v": 3}),
            S.UpdateWhere("t1", "k", 2, {"v": 4}),
            S.UpdateWhere("t1", "k", 3, {"v": 5}),
        ]
    )  # 7,200 rows: 14,400 change rows

    def no_read(*args, **kwargs):
        raise AssertionError("the change was read although the log showed it too large")

    monkeypatch.setattr(change_feed, "read_changes", no_read)
    result = stream.refresh(expect="full")
    assert "over auto_full_threshold" in result.reason
    monkeypatch.undo()
    stream.check()


def test_a_change_above_the_driver_limit_is_read_by_spark(env, monkeypatch):
    monkeypatch.setattr(change_feed, "DRIVER_READ_MAX_ROWS", 3)
    monkeypatch.setattr(
        change_feed, "_read_in_driver", lambda *a, **k: (_ for _ in ()).throw(AssertionError("read in the driver"))
    )
    env.source("t1", ROWS)
    stream = env.stream(
        "spark_read", "SELECT k, g, COUNT(*) AS n, SUM(v) AS sv, MIN(x) AS mx FROM {src}.t1 GROUP BY k, g"
    )
    stream.refresh(expect="full")
    env.apply(
        [
            S.Insert("t1", [S.row(90 + i, k=i % 2, v=i) for i in range(6)]),
            S.UpdateWhere("t1", "k", 1, {"v": 0}),
            S.DeleteRows("t1", [0, 1]),
        ]
    )
    stream.refresh(expect="differential")
    stream.check()


# --- 8. locations are URIs or paths, never rewritten -------------------------------------------------


def test_a_file_uri_source_path_with_spaces_and_glob_characters(env, tmp_path):
    # (delta-rs itself cannot open a table under a directory named with `[ ]`.)
    folder = tmp_path / "lake with spaces" / "a{b},c*d?"
    path = str(folder / "t1")
    S.create_source(path, ROWS)
    env.paths["t1"] = path
    import pathlib

    stream = env.stream("uri_source", AGG, sources={f"{env.src}.t1": pathlib.Path(path).as_uri()})
    stream.refresh(expect="full")
    stream.check()
    env.apply([S.Insert("t1", [S.row(95, k=2, v=9)]), S.DeleteRows("t1", [3])])
    stream.refresh(expect="differential")
    stream.check()
    assert env.spark.table(f"{env.src}.t1").count() == _count_rows(path)


# --- 9. readers during refreshes -------------------------------------------------------------------


def test_a_reader_looping_during_refreshes_never_fails(env):
    env.source("t1", ROWS)
    env.source("t2", [S.row(i, k=i % 3, v=i) for i in range(1, 6)])
    stream = env.stream(
        "read_while",
        "SELECT a.k, COUNT(*) AS n, SUM(b.v) AS sv FROM {src}.t1 a JOIN {src}.t2 b ON a.k = b.k GROUP BY a.k",
    )
    stream.refresh(expect="full")
    errors, reads, stop = [], [0], threading.Event()
    reader_session = env.spark.newSession()

    def read():
        while not stop.is_set():
            try:
                reader_session.sql(f"SELECT k, n, sv FROM {stream.view}").collect()
                reads[0] += 1
            except Exception as err:  # noqa: BLE001 - the test is that there are none
                errors.append(f"{type(err).__name__}: {str(err).splitlines()[0][:300]}")

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    try:
        for i in range(8):
            env.apply([S.Insert("t1", [S.row(200 + i, k=i % 3, v=i)]), S.UpdateRows("t2", [i % 5], {"v": i})])
            stream.refresh(expect="differential")
    finally:
        stop.set()
        thread.join(60)
    assert not errors, errors[:3]
    assert reads[0] > 0
    stream.check()


# --- 10. wide decimals are exact --------------------------------------------------------------------


def test_sum_and_avg_of_decimal_38_18_with_exact_duplicates(env):
    schema = pa.schema([("id", pa.int64()), ("k", pa.int32()), ("big", pa.decimal128(38, 18))])
    path = env.source_path("wide")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    one = decimal.Decimal("1.000000000000000001")
    near_bound = decimal.Decimal("9999999999999999999.123456789012345678")  # over DECIMAL(37,18)
    rows = [{"id": 1, "k": 1, "big": one}, {"id": 2, "k": 1, "big": one}, {"id": 3, "k": 2, "big": near_bound}]
    write_deltalake(path, pa.Table.from_pylist(rows, schema=schema), configuration=S.CDF_ON)
    env.paths["wide"] = path
    # AVG of the value near the bound is beyond DECIMAL(38, 22): Spark itself cannot compute it.
    stream = env.stream(
        "wide",
        "SELECT k, SUM(big) AS s, AVG(CASE WHEN k = 1 THEN big END) AS a, COUNT(*) AS n FROM {src}.wide GROUP BY k",
    )
    stream.refresh(expect="full")
    # Exact duplicates: their change rows consolidate into weights of 2 and 3.
    write_deltalake(path, pa.Table.from_pylist(rows[:2] * 1 + [rows[0]], schema=schema), mode="append")
    stream.refresh(expect="differential")
    stream.check()
    DeltaTable(path).delete("k = 1 AND id = 1")
    write_deltalake(
        path,
        pa.Table.from_pylist([{"id": 4, "k": 2, "big": decimal.Decimal("0.000000000000000003")}], schema=schema),
        mode="append",
    )
    stream.refresh(expect="differential")
    stream.check()


# --- 11. old files and leftovers are cleaned up ----------------------------------------------------


def test_old_stored_versions_are_vacuumed_and_results_stay_right(env, monkeypatch):
    from python_helpers.runtime.delta.embedded import housekeeping
    from python_helpers.runtime.refresh import run

    monkeypatch.setattr(housekeeping, "VACUUM_EVERY", 3)
    monkeypatch.setattr(run, "MIN_RETENTION_HOURS", 0)  # a user is refused below an hour: see test_bad_input
    env.source("t1", ROWS)
    stream = env.stream("vacuumed", AGG, retention_hours=0)
    stream.refresh(expect="full")
    target = storage_path(env.spark, env.target, stream.identifier)
    first_files = {os.path.basename(u) for u in DeltaTable(target).file_uris()}
    for i in range(6):
        env.apply([S.UpdateWhere("t1", "k", i % 3, {"v": i})])
        stream.refresh(expect="differential")
        stream.check()
    ops = [c.get("operation") for c in DeltaTable(target).history()]
    assert any(str(o).startswith("VACUUM") for o in ops), ops
    on_disk = {f for f in os.listdir(target) if f.endswith(".parquet")}
    live = {os.path.basename(u) for u in DeltaTable(target).file_uris()}
    assert not (first_files - live) & on_disk  # the first version's replaced files are gone


# --- 12. names that need quoting -----------------------------------------------------------------


def test_names_that_need_quoting_in_every_position(env):
    """Spark's Hive catalog allows only letters, digits and _ in schema and table names, so those
    are keywords here; column names hold spaces, back-quotes, dots, keywords and non-ASCII."""
    columns = pa.schema(
        [
            ("group", pa.int32()),
            ("order", pa.int64()),
            ("value", pa.int32()),
            ("a b", pa.string()),
            ("we`ird", pa.int32()),
            ("x.y", pa.int32()),
            ("é", pa.int32()),
        ]
    )
    path = env.source_path("order")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rows = [
        {"group": i % 3, "order": i, "value": i * 2, "a b": "xy"[i % 2], "we`ird": i % 2, "x.y": i, "é": 1}
        for i in range(8)
    ]
    write_deltalake(path, pa.Table.from_pylist(rows, schema=columns), configuration=S.CDF_ON)
    env.paths["order"] = path
    sql = (
        "SELECT `group`, `a b`, `we``ird`, COUNT(*) AS `n of`, SUM(`value`) AS `sum`, MAX(`order`) AS `order`, "
        "SUM(`x.y`) AS `x.y`, MIN(`é`) AS `é` FROM {src}.`order` GROUP BY `group`, `a b`, `we``ird`"
    )
    stream = env.stream("select", sql)
    first = stream.refresh(expect="full")
    assert first.rows_changed > 0
    stream.check()
    DeltaTable(path).update(updates={'"value"': '"value" + 1'}, predicate='"group" = 1')
    write_deltalake(path, pa.Table.from_pylist(rows[:2], schema=columns), mode="append")
    second = stream.refresh(expect="differential")  # not a full refresh blamed on the change feed
    assert second.reason is None
    stream.check()
    assert stream.refresh(expect="differential").skipped
    bag = env.stream("where", "SELECT `a b`, `we``ird`, `x.y` FROM {src}.`order` WHERE `group` <> 2")
    bag.refresh(expect="full")
    DeltaTable(path).delete('"order" = 3')
    bag.refresh(expect="differential")
    bag.check()


def test_an_internal_error_reading_changes_is_not_reported_as_unreadable_changes(env, monkeypatch):
    env.source("t1", ROWS)
    stream = env.stream("internal", AGG)
    stream.refresh(expect="full")
    env.apply([S.Insert("t1", [S.row(99, k=1, v=1)])])

    def broken(*args, **kwargs):
        raise ValueError("a bug in the reader")

    monkeypatch.setattr(change_feed, "read_changes", broken)
    with pytest.raises(ValueError, match="a bug in the reader"):
        stream.refresh()


# --- 13. file lists without limits -----------------------------------------------------------------


def test_a_source_of_many_files_is_published_without_a_file_list(env):
    path = env.source_path("many")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    S.create_source(path, [S.row(0, k=0, v=0)])
    table = pa.Table.from_pylist([S.row(i, k=i % 4, v=i % 9) for i in range(1, 901)], schema=S.SCHEMA)
    S.append_files(path, [table.slice(start, 1) for start in range(900)])  # one file per row: 900 files
    env.paths["many"] = path
    assert len(DeltaTable(path).file_uris()) > 800
    stream = env.stream("many", "SELECT k, COUNT(*) AS n, SUM(v) AS sv FROM {src}.many GROUP BY k")
    stream.refresh(expect="full")
    stream.check()
    assert env.spark.table(f"{env.src}.many").count() == 901
    text = env.spark.sql(f"SHOW CREATE TABLE {env.src}.many").collect()[0][0]
    assert len(text) < 2000, len(text)

    # Storage where no hard link can be made (an object store, another mount: simulated by links
    # failing as across devices): the source's view would name its 900 files one by one, more
    # text than the metastore keeps. The refresh must stop before its commit, not after it with
    # the stream table moved and the source view left behind.
    def no_links(*args, **kwargs):
        raise OSError(18, "Invalid cross-device link")

    target = storage_path(env.spark, env.target, stream.identifier)
    before = DeltaTable(target).version()
    S.append_files(path, [pa.Table.from_pylist([S.row(901, k=1, v=5)], schema=S.SCHEMA)])
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(published_files.os, "link", no_links)
        with pytest.raises(StreamTableError, match=r"characters of text, more than the metastore keeps"):
            stream.refresh()
    assert DeltaTable(target).version() == before  # nothing committed: the offsets did not move
    stream.refresh(expect="differential")  # links work again: the change is read, not lost
    stream.check()
    assert env.spark.table(f"{env.src}.many").count() == 902


def test_partition_values_with_commas_braces_and_glob_characters(env):
    schema = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.int32())])
    path = env.source_path("parts")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    values = ["a,b", "{c}", "[d]*?", "e f", "x=y/z", None]
    rows = [{"id": i, "p": p, "v": i} for i, p in enumerate(values)]
    write_deltalake(path, pa.Table.from_pylist(rows, schema=schema), partition_by=["p"], configuration=S.CDF_ON)
    env.paths["parts"] = path
    stream = env.stream("parts", "SELECT p, COUNT(*) AS n, SUM(v) AS sv FROM {src}.parts GROUP BY p")
    stream.refresh(expect="full")
    stream.check()
    write_deltalake(
        path,
        pa.Table.from_pylist([{"id": 10, "p": "a,b", "v": 5}, {"id": 11, "p": "{c}", "v": 1}], schema=schema),
        mode="append",
    )
    DeltaTable(path).delete("id = 2")
    DeltaTable(path).update(updates={"v": "v + 100"}, predicate="id = 3")
    stream.refresh(expect="differential")
    stream.check()
    got = sorted(((r.p or ""), r.v) for r in env.spark.table(f"{env.src}.parts").collect())
    want = sorted(((r["p"] or ""), r["v"]) for r in DeltaTable(path).to_pyarrow_table().to_pylist())
    assert got == want


# --- 15. dbt's threads share the caches ---------------------------------------------------------------


def test_refreshes_on_four_threads_sharing_sources(env):
    env.source("t1", ROWS)
    env.source("t2", [S.row(i, k=i % 3, v=i) for i in range(1, 8)])
    sqls = {
        "th_agg": AGG,
        "th_join": "SELECT a.k, COUNT(*) AS n FROM {src}.t1 a JOIN {src}.t2 b ON a.k = b.k GROUP BY a.k",
        "th_bag": "SELECT k, v FROM {src}.t2 WHERE v > 2",
        "th_distinct": "SELECT DISTINCT g FROM {src}.t1",
    }
    streams = [env.stream(name, sql) for name, sql in sqls.items()]

    def run_all(expect):
        errors = []

        def one(st):
            try:
                st.refresh(expect=expect)
            except Exception as err:  # noqa: BLE001
                errors.append(f"{st.identifier}: {type(err).__name__}: {err}")

        threads = [threading.Thread(target=one, args=(st,)) for st in streams]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not errors, errors
        for st in streams:
            st.check()

    run_all("full")
    for i in range(3):
        env.apply([S.Insert("t1", [S.row(300 + i, k=i, v=i)]), S.UpdateRows("t2", [i], {"v": 10 + i})])
        run_all("differential")


def test_eight_threads_that_pinned_different_source_versions_never_move_its_view_back(env, monkeypatch):
    """dbt's threads refresh models over one source while it changes: each thread pins a newer
    version. The oldest reads the source view's marker, then waits while the seven newer ones
    publish; when it goes on, the view must still show the newest version (publishing read the
    marker, altered the view and wrote the marker with no lock: the oldest moved the view back)."""
    from python_helpers.runtime.refresh import steps

    env.source("t1", ROWS)
    streams = [env.stream(f"pin{i}", AGG) for i in range(8)]
    for stream in streams:
        stream.refresh(expect="full")
    go = [threading.Event() for _ in streams]
    planned = [threading.Event() for _ in streams]
    oldest_linked, newer_done = threading.Event(), threading.Event()
    index = {}  # thread name -> stream index
    reached = steps.reached

    def hook(name: str) -> None:
        i = index.get(threading.current_thread().name)
        if i is not None and name == "planned":
            planned[i].set()
            assert go[i].wait(60)
        if i == 0 and name == "source_generation_linked":
            oldest_linked.set()
            newer_done.wait(8)  # with the lock the newer ones cannot publish meanwhile: times out
        reached(name)

    monkeypatch.setattr(steps, "reached", hook)
    errors: list = []

    def one(i: int) -> None:
        try:
            streams[i].refresh(expect="differential")
        except Exception as err:  # noqa: BLE001
            errors.append(f"{streams[i].identifier}: {type(err).__name__}: {err}")
            planned[i].set()
            oldest_linked.set()

    threads = []
    for i in range(8):  # each thread pins the version after one more change
        env.apply([S.Insert("t1", [S.row(400 + i, k=i % 3, v=i)])])
        thread = threading.Thread(target=one, args=(i,), name=f"pin-{i}")
        index[thread.name] = i
        threads.append(thread)
        thread.start()
        assert planned[i].wait(120), f"thread {i} did not plan"
    go[0].set()
    assert oldest_linked.wait(120)
    for event in go[1:]:
        event.set()
    for thread in threads[1:]:
        thread.join(300)
    newer_done.set()
    threads[0].join(300)
    assert not errors, errors
    # The source's view shows its newest version: every row the changes inserted.
    shown = {r[0] for r in env.spark.sql(f"SELECT id FROM {env.src}.t1").collect()}
    assert {400 + i for i in range(8)} <= shown, sorted(shown)
    streams[7].check()  # pinned the newest version
    streams[0].refresh(expect="differential")  # pinned the oldest: catches up
    streams[0].check()


_HOLD_LOCK = """
import fcntl, sys, time
with open(sys.argv[1], "a+") as handle:
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    released = time.time()
    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
print(released, flush=True)
"""


def test_a_source_view_is_published_by_one_process_at_a_time(env, monkeypatch):
    """Two dbt processes on one warehouse publish a shared source's view: the second waits for
    the first's marker read, view update and marker write (an flock in the view's published
    root), so neither can move the view back. Here another process holds that lock for a few
    seconds while this one refreshes: its view update comes after the release."""
    import subprocess
    import sys
    import time

    from python_helpers.runtime.refresh import steps

    env.source("t1", ROWS)
    stream = env.stream("locked", AGG)
    stream.refresh(expect="full")
    env.apply([S.Insert("t1", [S.row(500, k=1, v=1)])])
    conn = as_connection(env.spark)
    root = published_files.source_root(publishing.source_schema_dir(conn, f"{env.src}.t1"), "t1")
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, os.path.join(root, publishing.LOCK_FILE), "6"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    altered: list = []
    reached = steps.reached

    def hook(name: str) -> None:
        if name == "source_view_altered":
            altered.append(time.time())
        reached(name)

    monkeypatch.setattr(steps, "reached", hook)
    stream.refresh(expect="differential")
    released = float(holder.stdout.readline())
    holder.wait(30)
    assert altered and altered[0] >= released, (altered, released)
    shown = {r[0] for r in env.spark.sql(f"SELECT id FROM {env.src}.t1").collect()}
    assert 500 in shown
    stream.check()


# --- source views that no stream table reads any more ----------------------------------------


def test_a_source_view_no_stream_table_read_for_the_retention_is_dropped_with_its_files(env):
    """A model dropped from the project never refreshes again: its source's view and the
    generation it reads used to stay for ever, their hard links keeping the source's old files
    on disk after the source's VACUUM. The next refresh publishing into that schema drops a
    view of ours unread for the retention (7 days) and its files; a user's view is left; a
    stream table reading the source again publishes it again."""
    import time

    env.source("t1", ROWS)
    env.source("t2", ROWS)
    env.source("t3", ROWS)
    env.spark.sql(f"CREATE DATABASE IF NOT EXISTS {env.src}")
    env.spark.sql(f"CREATE VIEW {env.src}.t3 AS SELECT 42 AS answer")  # the user's, not ours
    dropped = env.stream("dropped_model", AGG)
    kept = env.stream("kept_model", AGG.replace("t1", "t2"))
    users = env.stream("over_users_view", AGG.replace("t1", "t3"))
    for stream in (dropped, kept, users):
        stream.refresh(expect="full")
    conn = as_connection(env.spark)
    schema_dir = publishing.source_schema_dir(conn, f"{env.src}.t1")
    roots = {t: published_files.source_root(schema_dir, t) for t in ("t1", "t2", "t3")}
    assert all(os.path.isdir(r) for r in roots.values())
    # Eight days pass: nothing read t1 or t3 since (dropped_model is gone from the project, and
    # the model over the user's view too); the last sweep of the schema was as long ago.
    old = time.time() - 8 * 24 * 3600
    sources_dir = os.path.dirname(roots["t1"])
    for name in os.listdir(sources_dir):
        os.utime(os.path.join(sources_dir, name), (old, old))
    for table in ("t1", "t3"):
        for name in os.listdir(roots[table]):
            os.utime(os.path.join(roots[table], name), (old, old))
    said = []
    env.apply([S.Insert("t2", [S.row(80, k=1, v=2)])])
    result = refresh_stream_table(env.spark, kept.request(), log=lambda level, text: said.append(text))
    assert result.mode == "differential"
    kept.check()
    assert not env.spark.catalog.tableExists(f"{env.src}.t1")
    assert not os.path.exists(roots["t1"])
    assert any("dropped the source views" in t and f"{env.src}.t1" in t for t in said), said
    assert [tuple(r) for r in env.spark.table(f"{env.src}.t3").collect()] == [(42,)]  # never ours
    assert env.spark.table(f"{env.src}.t2").count() == len(ROWS) + 1
    # A stream table reading t1 again (the model is back) publishes its view again.
    env.apply([S.Insert("t1", [S.row(81, k=2, v=3)])])
    dropped.refresh(expect="differential")
    dropped.check()
    assert env.spark.table(f"{env.src}.t1").count() == len(ROWS) + 1
