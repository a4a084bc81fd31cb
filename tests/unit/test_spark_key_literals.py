"""A key-restricted read writes the change's keys out as literals (runtime/delta/bound_views.py
`key_in`; the spark engine's kinds of key by Spark type, `key_kind`): Delta prunes files and
Parquet pages by a literal `IN` list, not by an `IN` subquery. Only where a literal compares as
the join does."""

from __future__ import annotations

import datetime
import decimal

from python_helpers.runtime.delta.bound_views import key_in
from python_helpers.runtime.delta.spark.bindings import key_kind


def _sql(column_type, key_type, values) -> str | None:
    found = key_in("k", values, key_kind(column_type), key_kind(key_type))
    return None if found is None else found.sql("spark")


def test_integral_keys_of_integral_columns_are_number_literals():
    assert _sql("bigint", "bigint", [10_018_243, 3]) == "`k` IN (3, 10018243)"
    assert _sql("int", "bigint", [7]) == "`k` IN (7)"


def test_string_keys_are_quoted_as_spark_reads_them():
    assert _sql("string", "string", ["a", "it's", "back\\slash"]) == "`k` IN ('a', 'back\\\\slash', 'it\\'s')"


def test_date_keys_are_typed_literals():
    assert _sql("date", "date", [datetime.date(2026, 11, 29)]) == "`k` IN (CAST('2026-11-29' AS DATE))"


def test_no_keys_meet_no_row():
    assert _sql("bigint", "bigint", []) == "FALSE"


def test_anything_else_stays_a_subquery():
    assert _sql("string", "bigint", [1]) is None  # a string column meets numbers by a cast
    assert _sql("bigint", "string", ["1"]) is None
    assert _sql("bigint", "bigint", [True]) is None
    assert _sql("bigint", "bigint", ["1"]) is None  # a value not of its kind
    assert _sql("decimal(15,2)", "decimal(15,2)", [decimal.Decimal("1.5")]) is None
    assert _sql("timestamp", "timestamp", [datetime.datetime(2026, 11, 29)]) is None
    assert _sql("date", "date", [datetime.datetime(2026, 11, 29)]) is None
    assert _sql("string collate UTF8_LCASE", "string collate UTF8_LCASE", ["a"]) is None
    assert _sql(None, "bigint", [1]) is None


def test_more_keys_than_parquet_takes_as_a_list_stay_a_subquery(monkeypatch):
    from python_helpers.runtime.delta import bound_views

    monkeypatch.setattr(bound_views, "PAGE_FILTER_KEYS", 2)
    assert _sql("bigint", "bigint", [1, 2]) is not None
    assert _sql("bigint", "bigint", [1, 2, 3]) is None
