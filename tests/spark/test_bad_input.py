"""Bad input: typed errors that name the model, fallbacks to full refresh that say why, and a
stored result that no failed refresh ever touches."""

from __future__ import annotations

import os
import re
import shutil

import pytest
from deltalake import DeltaTable

from python_helpers import errors as E
from tests.support import sources as S
from tests.support.shapes import INITIAL, SMOKE_BATCHES

pytestmark = pytest.mark.spark

AGG = "SELECT k, COUNT(*) AS n, SUM(v) AS sv, MAX(d) AS md FROM {src}.t1 GROUP BY k"


def _rows(spark, view):
    return sorted((tuple(r) for r in spark.table(view).collect()), key=repr)


def _view_exists(spark, view):
    return spark.catalog.tableExists(view)


def _built(env, name="bad", sql=AGG, **kw):
    env.source("t1", INITIAL["t1"])
    stream = env.stream(name, sql, **kw)
    stream.refresh(expect="full")
    stream.check()
    return stream


# --- missing sources --------------------------------------------------------------------------


def test_missing_source_on_build_names_the_model_and_the_relation(env):
    stream = env.stream("no_source", "SELECT k FROM {src}.nope")
    with pytest.raises(E.SourceMissing) as info:
        stream.refresh()
    text = str(info.value)
    assert stream.model in text
    assert f"{env.src}.nope" in text.lower()
    assert not _view_exists(env.spark, stream.view)


def test_source_deleted_after_build_raises_and_keeps_the_result(env):
    stream = _built(env, "gone_source")
    before = _rows(env.spark, stream.view)
    shutil.rmtree(env.paths["t1"])
    with pytest.raises(E.SourceMissing) as info:
        stream.refresh()
    assert stream.model in str(info.value)
    assert _rows(env.spark, stream.view) == before


def test_explicit_source_path_that_is_not_a_delta_table(env, tmp_path):
    empty = tmp_path / "not_delta"
    empty.mkdir()
    stream = env.stream("bad_path", "SELECT k FROM {src}.t1", sources={f"{env.src}.t1": str(empty)})
    with pytest.raises(E.SourceMissing) as info:
        stream.refresh()
    assert stream.model in str(info.value)


# --- change data feed off ---------------------------------------------------------------------


def test_no_change_feed_differential_mode_raises_with_the_fix(env):
    env.source("t1", INITIAL["t1"], cdf=False)
    stream = env.stream("no_cdf_diff", AGG, refresh_mode="differential")
    # The build may run (it reads a snapshot); at the latest the first refresh that needs
    # changes must refuse.
    raised = None
    try:
        stream.refresh()
    except E.ChangeFeedDisabled as err:
        raised = err
    if raised is None:
        before = _rows(env.spark, stream.view)
        env.apply(SMOKE_BATCHES[0][:2], only_existing=True)
        with pytest.raises(E.ChangeFeedDisabled) as info:
            stream.refresh()
        raised = info.value
        assert _rows(env.spark, stream.view) == before
    text = str(raised)
    assert stream.model in text
    assert "ALTER TABLE" in text and "enableChangeDataFeed" in text
    assert f"{env.src}.t1" in text.lower()


def test_no_change_feed_auto_mode_refreshes_in_full_and_says_why(env):
    env.source("t1", INITIAL["t1"], cdf=False)
    stream = env.stream("no_cdf_auto", AGG)
    stream.refresh(expect="full")
    stream.check()
    env.apply(SMOKE_BATCHES[0], only_existing=True)
    result = stream.refresh(expect="full")
    assert result.reason and "change data feed" in result.reason.lower()
    stream.check()
    # Turning the feed on makes it differential again (possibly after one more full refresh,
    # since the versions before the switch have no change data).
    DeltaTable(env.paths["t1"]).alter.set_table_properties({"delta.enableChangeDataFeed": "true"})
    env.apply(SMOKE_BATCHES[1], only_existing=True)
    stream.refresh()
    stream.check()
    env.apply(SMOKE_BATCHES[2], only_existing=True)
    stream.refresh(expect="differential")
    stream.check()


# --- SQL problems -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELEC k FROM {src}.t1",
        "SELECT k FROM {src}.t1 WHERE (k > 1",
        "SELECT k FROM {src}.t1; SELECT v FROM {src}.t1",
        "",
    ],
)
def test_sql_that_does_not_parse(env, sql):
    env.source("t1", INITIAL["t1"])
    stream = env.stream("unparsable", sql)
    with pytest.raises(E.SqlParseError) as info:
        stream.refresh()
    assert stream.model in str(info.value)
    assert not _view_exists(env.spark, stream.view)


# Constructs that can never be differential (docs/supported-sql.md) or are outside the supported set.
UNSUPPORTED = [
    # Non-linear recursion (the working table joined to itself): maintained by recompute only.
    (
        "WITH RECURSIVE r AS (SELECT id, k FROM {src}.t1 WHERE k = 0 UNION ALL SELECT r.id, r2.k + 1 FROM r "
        "JOIN r AS r2 ON r.id = r2.id WHERE r2.k < 2) SELECT id, k FROM r",
        "recursive",
    ),
    ("SELECT id, k FROM {src}.t1 LIMIT 3", "limit"),
    ("SELECT id, rand() AS r FROM {src}.t1", "rand"),
    ("SELECT id, current_timestamp() AS ts FROM {src}.t1", "current_timestamp"),
    ("SELECT id, uuid() AS u FROM {src}.t1", "uuid"),
    ("SELECT id FROM {src}.t1 TABLESAMPLE (50 PERCENT)", "tablesample"),
    ("SELECT k, first(v) AS f FROM {src}.t1 GROUP BY k", "first"),
]


@pytest.mark.parametrize("sql,construct", UNSUPPORTED, ids=[c for _, c in UNSUPPORTED])
def test_unsupported_sql_under_differential_names_the_construct(env, sql, construct):
    env.source("t1", INITIAL["t1"])
    stream = env.stream("unsupported_" + construct, sql, refresh_mode="differential")
    with pytest.raises(E.UnsupportedSql) as info:
        stream.refresh()
    text = str(info.value)
    assert stream.model in text
    assert construct in text.lower()
    assert not _view_exists(env.spark, stream.view)


# The deterministic ones of those, which auto refreshes in full (the rest cannot match a recompute).
DETERMINISTIC_UNSUPPORTED = [
    # Non-linear recursion (the working table joined to itself): maintained by recompute only.
    (
        "WITH RECURSIVE r AS (SELECT id, k FROM {src}.t1 WHERE k = 0 UNION ALL SELECT r.id, r2.k + 1 FROM r "
        "JOIN r AS r2 ON r.id = r2.id WHERE r2.k < 2) SELECT id, k FROM r",
        "recursive",
    ),
    ("SELECT k, explode(array(k, v)) AS e FROM {src}.t1", "generator"),
    (
        "SELECT a.id, CASE WHEN a.k NOT IN (SELECT b.v FROM {src}.t1 b) THEN 1 ELSE 0 END AS e FROM {src}.t1 a",
        "in (subquery)",
    ),
]


@pytest.mark.parametrize("sql,construct", DETERMINISTIC_UNSUPPORTED, ids=[c for _, c in DETERMINISTIC_UNSUPPORTED])
def test_unsupported_sql_under_auto_refreshes_in_full_with_the_reason(env, sql, construct):
    env.source("t1", INITIAL["t1"])
    stream = env.stream("auto_" + re.sub(r"\W+", "_", construct), sql)
    first = stream.refresh(expect="full")
    stream.check()
    env.apply(SMOKE_BATCHES[0], only_existing=True)
    result = stream.refresh(expect="full")
    assert result.reason and construct in result.reason.lower(), result.reason
    stream.check()
    del first


def test_volatile_query_under_auto_refreshes_in_full(env):
    env.source("t1", INITIAL["t1"])
    stream = env.stream("auto_rand", "SELECT id, rand() AS r FROM {src}.t1")
    stream.refresh(expect="full")
    env.apply(SMOKE_BATCHES[0], only_existing=True)
    result = stream.refresh(expect="full")
    assert result.reason and "rand" in result.reason.lower()
    # Not comparable with a recompute (rand), but the row set must be the source's ids.
    ids = sorted(r.id for r in env.spark.table(stream.view).collect())
    assert ids == sorted(r["id"] for r in S.read_rows(env.paths["t1"]))


@pytest.mark.parametrize(
    "field,value,said",
    [
        ("refresh_mode", "sometimes", "sometimes"),
        ("engine", "quantum", "quantum"),
        # a vacuum with no retention could remove files a running query still reads
        ("retention_hours", 0, "at least 1"),
    ],
)
def test_invalid_config(env, field, value, said):
    env.source("t1", INITIAL["t1"])
    stream = env.stream("bad_config", AGG, **{field: value})
    with pytest.raises(E.InvalidConfig) as info:
        stream.refresh()
    assert stream.model in str(info.value) and said in str(info.value)


# --- the definition changes -------------------------------------------------------------------


def test_changed_sql_forces_a_full_refresh_with_the_reason(env):
    stream = _built(env, "changing")
    env.apply(SMOKE_BATCHES[0], only_existing=True)
    stream.sql = env.sql("SELECT k, COUNT(*) AS n, MIN(v) AS mn FROM {src}.t1 WHERE v IS NOT NULL GROUP BY k")
    result = stream.refresh(expect="full")
    assert result.reason and any(w in result.reason.lower() for w in ("sql", "definition", "query", "changed"))
    stream.check()
    env.apply(SMOKE_BATCHES[1], only_existing=True)
    stream.refresh(expect="differential")
    stream.check()


def test_whitespace_and_case_changes_are_not_a_new_definition(env):
    stream = _built(env, "reformatted", sql="SELECT k, COUNT(*) AS n FROM {src}.t1 GROUP BY k")
    env.apply(SMOKE_BATCHES[0], only_existing=True)
    stream.sql = env.sql("select k,\n       count(*) as n\n  from {src}.t1\n group by k")
    stream.refresh(expect="differential")
    stream.check()


# --- changes that can no longer be read -------------------------------------------------------


def test_source_recreated_at_the_same_path_falls_back_to_full(env):
    stream = _built(env, "recreated")
    env.apply(SMOKE_BATCHES[0], only_existing=True)  # the stream table's offset is now behind several versions
    stream.refresh(expect="differential")
    path = env.paths["t1"]
    shutil.rmtree(path)
    S.create_source(path, INITIAL["t1"][:4])  # a new table: version 0 again
    result = stream.refresh(expect="full")
    assert result.reason, "the fallback says why"
    stream.check()
    env.apply([S.Insert("t1", [S.row(None, 1, "a", 4)])])
    stream.refresh(expect="differential")
    stream.check()


def test_source_overwritten_in_place_is_handled(env):
    stream = _built(env, "overwritten")
    S.create_source(env.paths["t1"], INITIAL["t1"][5:])  # mode=overwrite: a new version, not a new table
    result = stream.refresh()
    stream.check()
    assert result.mode in ("full", "differential")
    env.apply(SMOKE_BATCHES[1], only_existing=True)
    stream.refresh(expect="differential")
    stream.check()


def test_consumed_log_versions_cleaned_up_falls_back_to_full(env):
    env.source("t1", INITIAL["t1"])
    path = env.paths["t1"]
    DeltaTable(path).alter.set_table_properties(
        {"delta.logRetentionDuration": "interval 0 seconds", "delta.enableExpiredLogCleanup": "true"}
    )
    stream = env.stream("cleaned", AGG)
    stream.refresh(expect="full")
    env.apply(SMOKE_BATCHES[0], only_existing=True)
    env.apply(SMOKE_BATCHES[1], only_existing=True)
    dt = DeltaTable(path)
    dt.create_checkpoint()
    dt.cleanup_metadata()
    dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    logs = [f for f in os.listdir(os.path.join(path, "_delta_log")) if f.endswith(".json")]
    assert "00000000000000000001.json" not in logs  # the versions the refresh needs are gone
    result = stream.refresh(expect="full")
    assert result.reason
    stream.check()
    env.apply(SMOKE_BATCHES[2], only_existing=True)
    stream.refresh(expect="differential")
    stream.check()


def test_change_data_files_deleted_falls_back_to_full(env):
    stream = _built(env, "cdf_gone")
    env.apply([S.UpdateRows("t1", [0, 1], {"v": 5}), S.UpdateWhere("t1", "k", 2, {"d": None})])
    cdc = os.path.join(env.paths["t1"], "_change_data")
    assert os.path.isdir(cdc)
    shutil.rmtree(cdc)
    result = stream.refresh(expect="full")
    assert result.reason
    stream.check()


def test_source_gains_a_column(env):
    stream = _built(env, "wider", sql="SELECT k, SUM(v) AS sv, COUNT(*) AS n FROM {src}.t1 GROUP BY k")
    import pyarrow as pa
    from deltalake import write_deltalake

    wider = S.SCHEMA.append(pa.field("extra", pa.string()))
    rows = [dict(S.row(100, 1, "a", 7), extra="new")]
    write_deltalake(env.paths["t1"], pa.Table.from_pylist(rows, schema=wider), mode="append", schema_mode="merge")
    stream.refresh()
    stream.check()
    env.apply([S.DeleteWhere("t1", "k", 1)])
    stream.refresh(expect="differential")
    stream.check()


def test_source_loses_a_column_the_query_reads(env):
    stream = _built(env, "narrower", sql="SELECT k, SUM(v) AS sv FROM {src}.t1 GROUP BY k")
    before = _rows(env.spark, stream.view)
    import pyarrow as pa
    from deltalake import write_deltalake

    narrow = pa.schema([f for f in S.SCHEMA if f.name != "v"])
    write_deltalake(
        env.paths["t1"],
        pa.Table.from_pylist([{"id": 1, "k": 1}], schema=narrow),
        mode="overwrite",
        schema_mode="overwrite",
    )
    with pytest.raises(E.StreamTableError) as info:
        stream.refresh()
    assert stream.model in str(info.value)
    assert _rows(env.spark, stream.view) == before


# --- a failed refresh leaves the stored result alone ------------------------------------------


def test_failed_refreshes_leave_the_result_unchanged(env):
    stream = _built(env, "survivor")
    env.apply(SMOKE_BATCHES[0], only_existing=True)
    stream.refresh(expect="differential")
    stream.check()
    before = _rows(env.spark, stream.view)
    good_sql = stream.sql

    # 1. unparsable SQL
    stream.sql = "SELECT FROM WHERE"
    with pytest.raises(E.SqlParseError):
        stream.refresh()
    # 2. unsupported under differential
    stream.sql = env.sql("SELECT k, v, EXISTS (SELECT 1 FROM {src}.t1 b WHERE b.v > a.v) AS e FROM {src}.t1 a")
    with pytest.raises(E.UnsupportedSql):
        stream.refresh(refresh_mode="differential")
    # 3. a source that does not exist
    stream.sql = env.sql("SELECT k FROM {src}.missing")
    with pytest.raises(E.SourceMissing):
        stream.refresh()
    # 4. invalid config
    stream.sql = good_sql
    with pytest.raises(E.InvalidConfig):
        stream.refresh(refresh_mode="nope")

    assert _rows(env.spark, stream.view) == before
    stream.check()  # sources unchanged since the last good refresh
    # And the next good refresh is still differential from the last good offsets.
    env.apply(SMOKE_BATCHES[1], only_existing=True)
    stream.refresh(expect="differential")
    stream.check()


def test_spark_engine_without_delta_lake_is_a_typed_error(env):
    """This session has no Delta Lake jars: engine='spark' cannot work and must say so (not a Java error)."""
    env.source("t1", INITIAL["t1"])
    stream = env.stream("spark_engine", AGG, engine="spark")
    with pytest.raises(E.StreamTableError) as info:
        stream.refresh()
    assert stream.model in str(info.value)
    assert not _view_exists(env.spark, stream.view)


@pytest.mark.parametrize(
    "feature,props",
    [
        ("column", {"delta.columnMapping.mode": "name", "delta.minReaderVersion": "2", "delta.minWriterVersion": "5"}),
        ("deletion", {"delta.enableDeletionVectors": "true"}),
    ],
)
def test_source_with_features_the_embedded_engine_cannot_read(env, feature, props):
    """Column mapping / deletion vectors: the parquet files alone do not give the table's rows, so
    the embedded engine must refuse with a typed error naming the feature (never read wrong rows)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    path = env.source_path("featured")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_deltalake(
        path,
        pa.table({"id": pa.array([1, 2, 3], pa.int64()), "k": pa.array([1, 1, 2], pa.int32())}),
        configuration={"delta.enableChangeDataFeed": "true", **props},
    )
    env.paths["featured"] = path
    stream = env.stream("featured_" + feature, "SELECT k, COUNT(*) AS n FROM {src}.featured GROUP BY k")
    with pytest.raises(E.StreamTableError) as info:
        stream.refresh()
    text = str(info.value).lower()
    assert stream.model in str(info.value)
    assert feature in text
    assert not _view_exists(env.spark, stream.view)
