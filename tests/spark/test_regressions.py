"""Minimal reproductions of refresh bugs the oracle tests found, one test each (kept as regressions).

Each builds the smallest source and change that showed the bug, refreshes, and compares with the
recompute (or asserts the documented error).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from python_helpers import errors as E
from tests.support import sources as S

pytestmark = pytest.mark.spark


def test_global_aggregate_with_where_when_the_change_is_filtered_out(env):
    """A change that the WHERE drops used to give the single global row a NULL __dvm_count, and the
    MERGE then failed delta-rs' NOT NULL check ("Invalid data found: 1 rows failed validation")."""
    env.source("t1", [S.row(1, 1, "a", 3)])
    stream = env.stream("global_where", "SELECT COUNT(*) AS n, SUM(v) AS sv FROM {src}.t1 WHERE k = 1")
    stream.refresh(expect="full")
    env.apply([S.Insert("t1", [S.row(None, 2, "b", 4)])])
    stream.refresh(expect="differential")
    stream.check()
    env.apply([S.DeleteAll("t1")])
    stream.refresh(expect="differential")
    stream.check()


def test_collect_set_group_of_only_nulls_deleted(env):
    """collect_set over a group whose values are all NULL stores an empty array; deleting that
    group made delta-rs' MERGE panic (arrow-data variable_size.rs "range start index ... out of
    range") on the Arrow table Spark's toArrow() produced."""
    env.source("t1", [S.row(1, 2, None, 1), S.row(2, 3, None, 1)])
    stream = env.stream("empty_lists", "SELECT k, sort_array(collect_set(g)) AS gs FROM {src}.t1 GROUP BY k")
    stream.refresh(expect="full")
    env.apply([S.DeleteWhere("t1", "k", 2)])
    stream.refresh(expect="differential")
    stream.check()


@pytest.mark.parametrize("col,big", [("x", 1e8), ("d", "9999999999.99")])
def test_stddev_after_deleting_a_dominant_value(env, col, big):
    """VAR/STDDEV kept as Σx, Σx² in DOUBLE: removing a value that dominates Σx² leaves only
    rounding noise of the small values' spread (STDDEV(d) came out 0.0 instead of 3.26)."""
    rows = [
        S.row(1, 1, "a", **{col: big}),
        S.row(2, 1, "a", **{col: 1}),
        S.row(3, 1, "a", **{col: 2.5}),
        S.row(4, 1, "a", **{col: 7.25}),
    ]
    env.source("t1", rows)
    stream = env.stream(
        f"drift_{col}", f"SELECT k, STDDEV_SAMP({col}) AS s, VAR_POP({col}) AS vp FROM {{src}}.t1 GROUP BY k"
    )
    stream.refresh(expect="full")
    env.apply([S.DeleteRows("t1", [0])])
    stream.refresh(expect="differential")
    stream.check()


def test_first_without_ordering_is_rejected_under_differential(env):
    """first()/last()/any_value() are order-dependent: docs say they are rejected, but sqlglot
    parses them as exp.First/exp.Last/exp.AnyValue (not Anonymous), so the check missed them."""
    env.source("t1", [S.row(1, 1, "a", 3), S.row(2, 1, "a", 4)])
    for fn in ("first", "last", "any_value"):
        stream = env.stream(
            f"order_dep_{fn}", f"SELECT k, {fn}(v) AS f FROM {{src}}.t1 GROUP BY k", refresh_mode="differential"
        )
        with pytest.raises(E.UnsupportedSql, match=fn):
            stream.refresh()


def test_source_gains_a_column(env):
    """A column added to a source (schema_mode='merge'): the source's catalog view is a parquet
    glob over files with and without the column; without an explicit schema Spark infers it from
    one file and the view's column list fails to resolve when that file predates the column.
    Which file that is depends on the (random) file names: with 8 old files and 1 new one the
    old kind is picked ~8 times in 9."""
    env.source("t1", [S.row(1, 1, "a", 3)])
    for i in range(7):
        write_deltalake(env.paths["t1"], S.to_arrow([S.row(2 + i, i % 2, "b", i)]), mode="append")
    stream = env.stream("widened", "SELECT k, SUM(v) AS sv, COUNT(*) AS n FROM {src}.t1 GROUP BY k")
    stream.refresh(expect="full")
    wider = S.SCHEMA.append(pa.field("extra", pa.string()))
    write_deltalake(
        env.paths["t1"],
        pa.Table.from_pylist([dict(S.row(20, 1, "a", 7), extra="new")], schema=wider),
        mode="append",
        schema_mode="merge",
    )
    stream.refresh()
    stream.check()
    env.apply([S.DeleteWhere("t1", "k", 0)])
    stream.refresh()
    stream.check()


def test_sum_of_wide_decimal_keeps_its_scale(env):
    """SUM over DECIMAL(38,18): the delta SUM(x * __dvm_w) multiplies by a BIGINT weight, and Spark
    cuts the product's scale to 6 (precision > 38), so 1.123456789000000001 was stored as
    1.123457000000000000."""
    import decimal
    import os

    schema = pa.schema([("id", pa.int64()), ("k", pa.int32()), ("big", pa.decimal128(38, 18))])
    path = env.source_path("wide")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_deltalake(
        path,
        pa.Table.from_pylist([{"id": 1, "k": 1, "big": decimal.Decimal("1E-18")}], schema=schema),
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    env.paths["wide"] = path
    stream = env.stream(
        "wide_sum", "SELECT k, SUM(big) AS sb, AVG(big) AS ab, COUNT(*) AS n FROM {src}.wide GROUP BY k"
    )
    stream.refresh(expect="full")
    write_deltalake(
        path,
        pa.Table.from_pylist([{"id": 2, "k": 1, "big": decimal.Decimal("1.123456789")}], schema=schema),
        mode="append",
    )
    stream.refresh(expect="differential")
    stream.check()


def test_spark_computes_in_subquery_values_as_two_valued(spark):
    """The IN-as-value rewrite (sql/rewrites/exists_values.py) follows what Spark computes:
    outside WHERE, `x IN (subquery)` is TRUE on a match and FALSE otherwise, never NULL, even for a
    NULL x or a NULL in the subquery (SQL would give NULL). If a Spark upgrade changes this, the
    rewrite must change with it; this test says so first."""
    rows = spark.sql("""
        SELECT id, k IN (SELECT v FROM VALUES (1), (CAST(NULL AS INT)) AS b(v)) AS f
        FROM VALUES (1, 1), (2, CAST(NULL AS INT)), (3, 5) AS a(id, k)""").collect()
    assert sorted((r.id, r.f) for r in rows) == [(1, True), (2, False), (3, False)]


def test_min_of_a_new_group_whose_inserted_value_is_also_deleted(env):
    """A join's delta is not consolidated per group: a new group can receive a value as
    inserted (new left row x old right row) and as deleted (the right row updated away) in one
    delta. MIN took the inserted value without a rescan, since the group had no stored minimum."""
    env.source("t1", [S.row(1, k=1, v=1)])
    env.source("t2", [S.row(1, k=0, x=-5.0), S.row(2, k=1, x=2.0)])
    stream = env.stream(
        "min_new_group",
        "SELECT a.k, MIN(b.x) AS mn, COUNT(*) AS n FROM {src}.t1 a JOIN {src}.t2 b ON a.k = b.k GROUP BY a.k",
    )
    stream.refresh(expect="full")
    env.apply([S.Insert("t1", [S.row(2, k=0, v=1)]), S.UpdateRows("t2", [0], {"x": None})])
    stream.refresh(expect="differential")
    stream.check()
