"""User-defined functions: a UDAF is recognised as an aggregate (asked of Spark) and maintained
by group rescan; a scalar UDF is a projection; a non-deterministic UDF or a pandas UDAF makes
`auto` refresh in full with the reason. All against the oracle, after real changes."""

from __future__ import annotations

import pandas as pd
import pytest
from pyspark.sql.functions import pandas_udf, udf

from python_helpers import errors as E
from python_helpers.runtime.connections.base import FunctionKind, as_connection
from python_helpers.runtime.refresh.functions import classify_by_sql
from tests.support.harness import run_cycles
from tests.support.shapes import INITIAL, SMOKE_BATCHES

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("user_functions")]  # a module fixture


@pytest.fixture(scope="module", autouse=True)
def registered(spark):
    @pandas_udf("double")
    def dvm_test_spread(v: pd.Series) -> float:
        return float(v.max() - v.min()) if len(v.dropna()) else None

    @udf("int")
    def dvm_test_twice(x):
        return None if x is None else 2 * x

    @udf("double")
    def dvm_test_noise(x):
        import random

        return random.random()

    spark.udf.register("dvm_test_spread", dvm_test_spread)
    spark.udf.register("dvm_test_twice", dvm_test_twice)
    spark.udf.register("dvm_test_noise", dvm_test_noise.asNondeterministic())
    # A Hive UDAF (a class on Spark's classpath), as a user would register their own.
    spark.sql(
        "CREATE OR REPLACE TEMPORARY FUNCTION dvm_test_var AS "
        "'org.apache.hadoop.hive.ql.udf.generic.GenericUDAFVariance'"
    )
    spark.sql("CREATE OR REPLACE TEMPORARY FUNCTION dvm_test_hive_rand AS 'org.apache.hadoop.hive.ql.udf.UDFRand'")


def test_udaf_is_an_aggregate_and_a_scalar_udf_a_projection(env):
    for table in ("t1", "t2", "t3"):
        env.source(table, INITIAL[table])
    grouped = env.stream("udaf_grouped", "SELECT k, dvm_test_var(x) AS var, COUNT(*) AS n FROM {src}.t1 GROUP BY k")
    # Without GROUP BY: read as a scalar function it would aggregate the change rows alone.
    whole = env.stream("udaf_whole", "SELECT dvm_test_var(v) AS var FROM {src}.t1")
    scalar = env.stream("udf_scalar", "SELECT id, dvm_test_twice(v) AS v2 FROM {src}.t1 WHERE v > 0")
    run_cycles(env, [grouped, whole, scalar], SMOKE_BATCHES, expect="differential")


@pytest.mark.parametrize(
    "sql, reason",
    [
        ("SELECT id, dvm_test_noise(v) AS r FROM {src}.t1", "non-deterministic function dvm_test_noise()"),
        ("SELECT id, dvm_test_hive_rand() AS r FROM {src}.t1", "non-deterministic function dvm_test_hive_rand()"),
        ("SELECT k, dvm_test_spread(x) AS spread FROM {src}.t1 GROUP BY k", "pandas aggregate UDF dvm_test_spread()"),
    ],
)
def test_functions_outside_the_differential_set_refresh_in_full_with_the_reason(env, sql, reason):
    env.source("t1", INITIAL["t1"])
    stream = env.stream("udf_full", sql)
    stream.refresh(expect="full")
    env.apply(SMOKE_BATCHES[0], only_existing=True)
    result = stream.refresh(expect="full")
    assert reason in result.reason, result.reason
    if "non-deterministic" not in reason:
        stream.check()  # deterministic: the full refresh equals the recompute
    strict = env.stream("udf_strict", sql, refresh_mode="differential")
    with pytest.raises(E.UnsupportedSql) as info:
        strict.refresh()
    assert reason in str(info.value) and strict.model in str(info.value)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("percentile_approx", FunctionKind(aggregate=True, deterministic=True)),
        ("soundex", FunctionKind(aggregate=False, deterministic=True)),
        ("rand", FunctionKind(aggregate=False, deterministic=False)),
        ("uuid", FunctionKind(aggregate=False, deterministic=False)),
        # SQL does not say what a UDF or a Hive class is: refreshed in full rather than guessed.
        ("dvm_test_twice", FunctionKind(aggregate=False, deterministic=False, unclassified=True)),
        ("dvm_test_var", FunctionKind(aggregate=False, deterministic=False, unclassified=True)),
        ("dvm_test_no_such_function", None),
    ],
)
def test_functions_are_classified_over_sql_where_there_is_no_jvm(spark, name, expected):
    # What a Spark Connect or Thrift connection sees: DESCRIBE FUNCTION EXTENDED, asked of a
    # real session.
    assert classify_by_sql(as_connection(spark), name) == expected


def _register_scale(spark, factor: int) -> None:
    # Defined here, not at module level: registering it again is what a deploy of new code does.
    def dvm_test_scale(x):
        return None if x is None else x * factor

    spark.udf.register("dvm_test_scale", udf(dvm_test_scale, "int"))


def test_a_udf_whose_code_changed_in_a_deploy_rebuilds_the_stream_table(env, spark):
    """The same UDF name registered again: with the same code the refresh stays differential;
    with other code (a deploy) the next refresh is full, naming the function, and equals the
    recompute under the new code."""
    env.source("t1", INITIAL["t1"])
    _register_scale(spark, 2)
    stream = env.stream("udf_scaled", "SELECT id, dvm_test_scale(v) AS v2 FROM {src}.t1 WHERE v > 0")
    stream.refresh(expect="full")
    _register_scale(spark, 2)  # the same code again (a new process would do this)
    env.apply(SMOKE_BATCHES[0], only_existing=True)
    stream.refresh(expect="differential")
    stream.check()
    _register_scale(spark, 3)  # the deploy
    env.apply(SMOKE_BATCHES[1], only_existing=True)
    result = stream.refresh(expect="full")
    assert "user function dvm_test_scale()" in result.reason and "code" in result.reason, result.reason
    stream.check()
    env.apply(SMOKE_BATCHES[2], only_existing=True)
    stream.refresh(expect="differential")
    stream.check()
