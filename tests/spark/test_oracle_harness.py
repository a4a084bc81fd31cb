"""The oracle and the data helpers themselves: a checker that cannot fail proves nothing.

These do not need the refresh engine: the "stream table" here is a view over a table Spark wrote.
"""

from __future__ import annotations

import decimal
import math

import pytest

from tests.support import sources as S
from tests.support.oracle import (
    NAN,
    assert_matches_recompute,
    compare_rows,
    normalize_value,
    rewrite_sources,
)
from tests.support.shapes import INITIAL, SHAPES, SMOKE_BATCHES

# --- pure comparison (no Spark) ---------------------------------------------------------------


def test_compare_rows_is_a_multiset_comparison():
    same = compare_rows([(1, "a"), (1, "a"), (2, None)], [(2, None), (1, "a"), (1, "a")])
    assert same.ok
    dup_missing = compare_rows([(1, "a"), (2, None)], [(2, None), (1, "a"), (1, "a")])
    assert not dup_missing.ok
    assert dup_missing.missing == {(1, "a"): 1} and not dup_missing.extra
    extra = compare_rows([(1, "a"), (3, "z")], [(1, "a")])
    assert extra.extra == {(3, "z"): 1} and not extra.missing
    text = extra.describe()
    assert "EXTRA" in text and "(3, 'z')" in text


def test_floats_compare_with_tolerance_and_decimals_exactly():
    assert compare_rows([(0.1 + 0.2,)], [(0.3,)]).ok
    assert compare_rows([(1.0000000001e6,)], [(1e6,)]).ok
    assert compare_rows([(1e-17,)], [(0.0,)]).ok  # algebraic STDDEV of equal values
    assert compare_rows([(5.928694345000001,)], [(5.928694344999999,)]).ok  # straddles a rounding boundary
    assert compare_rows([([1.0, 2.0000000000001],)], [([1.0, 2.0],)]).ok  # inside arrays too
    assert not compare_rows([(1.001,)], [(1.0,)]).ok
    assert compare_rows([(decimal.Decimal("1.50"),)], [(decimal.Decimal("1.5"),)]).ok
    assert not compare_rows([(decimal.Decimal("1.51"),)], [(decimal.Decimal("1.50"),)]).ok
    assert compare_rows([(float("nan"), None)], [(float("nan"), None)]).ok
    assert not compare_rows([(None,)], [(0,)]).ok
    assert normalize_value(-0.0) == 0.0 and normalize_value(float("nan")) == NAN
    assert math.isinf(normalize_value(float("inf")))


def test_rewrite_sources_replaces_qualified_tables_only():
    sql = (
        "WITH c AS (SELECT * FROM s.t1 WHERE k > 1) "
        "SELECT t1.k, b.v FROM s.t1 JOIN S.T2 b ON t1.k = b.k JOIN c ON c.id = t1.id"
    )
    out = rewrite_sources(sql, {"s.t1": "__v1", "s.t2": "__v2"})
    assert "s.t1" not in out.lower() and "s.t2" not in out.lower()
    assert "__v1 AS t1" in out and "__v2 AS b" in out and "JOIN c" in out
    with pytest.raises(AssertionError, match="not known sources"):
        rewrite_sources("SELECT * FROM s.other", {"s.t1": "__v1"})


def test_shape_catalogue_parses_and_names_its_tables():
    assert len({s.name for s in SHAPES}) == len(SHAPES)
    for s in SHAPES:
        assert s.tables, s.name
        rewrite_sources(s.sql.replace("{src}", "src"), {f"src.{t}": f"__{t}" for t in s.tables})


# --- against Spark ----------------------------------------------------------------------------


@pytest.mark.spark
def test_oracle_detects_missing_extra_and_changed_rows(spark, env):
    env.source("t1", INITIAL["t1"])
    sql = env.sql("SELECT k, COUNT(*) AS n, SUM(d) AS sd, AVG(x) AS ax FROM {src}.t1 GROUP BY k")
    fake = f"{env.target}.fake"
    # A correct "stream table": the query's result written by Spark, shown through a view.
    from tests.support.oracle import recompute

    df, views = recompute(spark, sql, env.source_paths())
    df.write.mode("overwrite").saveAsTable(f"{env.target}.fake_store")
    for v in views:
        spark.catalog.dropTempView(v)
    spark.sql(f"CREATE OR REPLACE VIEW {fake} AS SELECT * FROM {env.target}.fake_store")
    assert_matches_recompute(spark, fake, sql, env.source_paths())

    # The sources change and the stored result does not: the oracle must notice and say what differs.
    env.apply([S.DeleteWhere("t1", "k", 1), S.UpdateRows("t1", [0], {"x": 100.0})])
    with pytest.raises(AssertionError) as info:
        assert_matches_recompute(spark, fake, sql, env.source_paths())
    text = str(info.value)
    assert "MISSING" in text and "EXTRA" in text and fake in text

    # Hidden columns leaking into the view are a failure too.
    spark.sql(f"CREATE OR REPLACE VIEW {fake} AS SELECT *, 1 AS __dvm_count FROM {env.target}.fake_store")
    with pytest.raises(AssertionError, match="columns differ"):
        assert_matches_recompute(spark, fake, sql, env.source_paths())


@pytest.mark.spark
def test_oracle_reads_duplicates_nulls_and_empty_sources(spark, env):
    env.source("t1", INITIAL["t1"])
    env.source("t2", [])
    sql = env.sql("SELECT a.k, a.g FROM {src}.t1 a UNION ALL SELECT b.k, b.g FROM {src}.t2 b")
    from tests.support.oracle import recompute

    df, views = recompute(spark, sql, env.source_paths())
    rows = df.collect()
    for v in views:
        spark.catalog.dropTempView(v)
    assert len(rows) == len(INITIAL["t1"])
    assert sum(1 for r in rows if r.k == 1 and r.g == "a") == 3  # duplicates kept
    assert any(r.k is None and r.g is None for r in rows)


@pytest.mark.spark
def test_smoke_batches_apply_cleanly(env):
    for t, rows in INITIAL.items():
        env.source(t, rows)
    versions = {t: S.table_version(p) for t, p in env.paths.items()}
    for batch in SMOKE_BATCHES:
        done = env.apply(batch)
        assert done, batch
    assert S.read_rows(env.paths["t1"])  # refilled by the last batch
    assert all(S.table_version(p) > versions[t] for t, p in env.paths.items())
    # Every change is in the change data feed.
    from deltalake import DeltaTable

    cdf = DeltaTable(env.paths["t1"]).load_cdf(starting_version=1).read_all()
    kinds = set(cdf.column("_change_type").to_pylist())
    assert {"insert", "delete", "update_preimage", "update_postimage"} <= kinds
