"""The stored row id must tell apart every pair of distinct keys and must
not depend on session settings."""

import pytest

from python_helpers.dvm.sqlgen import key_id, render, row_id

pytestmark = pytest.mark.spark

VALUES = """values
 (timestamp'2024-01-01 10:00:00.000001 UTC', timestamp_ntz'2024-01-01 10:00:00', 0.1d + 0.2d, cast(null as string)),
 (timestamp'2024-01-01 10:00:00.000002 UTC', timestamp_ntz'2024-01-01 10:00:00.000001', 0.3d, 'null'),
 (cast(null as timestamp), timestamp_ntz'2024-01-01 10:00:00', 0.1d + 0.2d, ''),
 (timestamp'2024-01-01 10:00:00.000001 UTC', cast(null as timestamp_ntz), double('NaN'), 'x')
 as t(a, b, c, d)"""


def test_row_ids_are_distinct_and_independent_of_the_session_time_zone(spark):
    query = f"select {render(row_id(['a', 'b', 'c', 'd']))} as h from {VALUES}"
    before = spark.conf.get("spark.sql.session.timeZone")
    try:
        seen = {}
        for tz in ("UTC", "America/New_York", "Asia/Kolkata"):
            spark.conf.set("spark.sql.session.timeZone", tz)
            seen[tz] = [r.h for r in spark.sql(query).collect()]
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
    ids = seen["UTC"]
    assert len(set(ids)) == len(ids) == 4  # microseconds, NULL vs 'null' vs '', 0.1+0.2 vs 0.3
    assert seen["America/New_York"] == ids and seen["Asia/Kolkata"] == ids
    assert all(len(h) == 32 for h in ids)  # 128-bit md5


def test_key_ids_are_the_keys_themselves_distinct_and_independent_of_session_settings(spark):
    query = f"select {render(key_id(['a', 'b', 'c', 'd']))} as h from {VALUES}"
    digests = f"select {render(row_id(['a', 'b', 'c', 'd']))} as h from {VALUES}"
    before = spark.conf.get("spark.sql.session.timeZone")
    nulls = "spark.sql.jsonGenerator.ignoreNullFields"
    try:
        seen = {}
        for tz in ("UTC", "America/New_York", "Asia/Kolkata"):
            spark.conf.set("spark.sql.session.timeZone", tz)
            seen[tz] = [r.h for r in spark.sql(query).collect()]
        digested = [r.h for r in spark.sql(digests).collect()]
        # The session's JSON setting for NULL fields does not change an id either.
        spark.conf.set(nulls, "false")
        seen["nulls kept"] = [r.h for r in spark.sql(query).collect()]
        assert [r.h for r in spark.sql(digests).collect()] == digested
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
        spark.conf.unset(nulls)
    ids = seen["UTC"]
    assert len(set(ids)) == len(ids) == 4
    assert seen["America/New_York"] == ids and seen["Asia/Kolkata"] == ids and seen["nulls kept"] == ids
    # Exact, not a digest: the key's own JSON form (NULL fields left out, positional names).
    assert ids[0] == '{"k0":"2024-01-01T10:00:00.000001Z","k1":"2024-01-01T10:00:00.000000","k2":0.30000000000000004}'
    assert ids[1].endswith('"k3":"null"}') and ids[2].endswith('"k3":""}')
