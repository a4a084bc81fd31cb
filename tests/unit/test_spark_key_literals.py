"""A key-restricted read on the spark engine writes the change's keys out as literals
(runtime/delta/spark/bindings.py `literal_keys`): Delta prunes files and Parquet pages by a
literal `IN` list, not by an `IN` subquery. Only where a literal compares as the join does."""

from __future__ import annotations

import datetime
import decimal

from python_helpers.runtime.delta.spark.bindings import literal_keys


def _sql(literals) -> list:
    return [e.sql("spark") for e in literals]


def test_integral_keys_of_integral_columns_are_number_literals():
    assert _sql(literal_keys([3, 10_018_243], "bigint", "bigint")) == ["3", "10018243"]
    assert _sql(literal_keys([7], "int", "bigint")) == ["7"]


def test_string_keys_are_quoted_as_spark_reads_them():
    assert _sql(literal_keys(["a", "it's", "back\\slash"], "string", "string")) == [
        "'a'",
        "'it\\'s'",
        "'back\\\\slash'",
    ]


def test_anything_else_stays_a_subquery():
    assert literal_keys([], "bigint", "bigint") is None  # `IN ()` is no SQL
    assert literal_keys([1], "string", "bigint") is None  # a string column meets numbers by a cast
    assert literal_keys(["1"], "bigint", "string") is None
    assert literal_keys([True], "bigint", "bigint") is None
    assert literal_keys([decimal.Decimal("1.5")], "decimal(15,2)", "decimal(15,2)") is None
    assert literal_keys([datetime.date(2026, 11, 29)], "date", "date") is None
    assert literal_keys([1], None, "bigint") is None
