"""The stored row id must tell apart every pair of distinct keys and must
not depend on session settings."""

import pytest

from python_helpers.dvm.sqlgen import plain_key_id, render, row_id

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


# Keys that a plain join of their text would confuse: separators and length prefixes inside
# strings, NULL against 'n' and '', negative numbers.
PLAIN_KEYS = [
    (1, "2|3"),
    (12, "|3"),
    (1, "2"),
    (None, "n"),
    (None, None),
    (-1, ""),
    (1, "1:x"),
    (11, ":x"),
    (0, "é|"),
    (0, "é"),
]


def _decode(text):
    """Read a plain key id back into its values (int, string), the one way it can be read."""
    out, i = [], 0
    while i <= len(text):
        if text.startswith("n", i):
            out.append(None)
            i += 1
        elif len(out) == 1:  # the string column: <length>:<text>
            colon = text.index(":", i)
            length = int(text[i:colon])
            out.append(text[colon + 1 : colon + 1 + length])
            i = colon + 1 + length
        else:
            end = text.find("|", i)
            end = len(text) if end < 0 else end
            out.append(int(text[i:end]))
            i = end
        if i == len(text):
            break
        assert text[i] == "|"
        i += 1
    return tuple(out)


def test_plain_key_ids_read_back_as_their_keys(spark):
    rows = ", ".join(
        f"({'cast(null as bigint)' if a is None else a}, {'cast(null as string)' if b is None else repr(b)})"
        for a, b in PLAIN_KEYS
    )
    query = f"select {render(plain_key_id(['a', 'b'], None, ['bigint', 'string']))} as h from values {rows} as t(a, b)"
    ids = [r.h for r in spark.sql(query).collect()]
    assert [_decode(h) for h in ids] == PLAIN_KEYS
    assert len(set(ids)) == len(ids)
    assert ids[0] == "1|3:2|3" and ids[4] == "n|n"
    # One integer column is its digits; a key of any other type has none (the row id digests it).
    assert render(plain_key_id(["a"], None, ["int"])) == "COALESCE(CAST(a AS STRING), 'n')"
    assert plain_key_id(["a", "b"], None, ["bigint", "double"]) is None
    assert plain_key_id(["a"], None, ["timestamp_ntz"]) is None


# Keys of the other plain types: NULLs beside values whose text could look alike, scales kept,
# dates outside years 1-9999, instants a microsecond apart.
TYPED_KEYS = """values
 (cast(1.50 as decimal(20,6)), date'2024-01-01', timestamp'2024-01-01 10:00:00.000001 UTC', true),
 (cast(1.5 as decimal(20,6)) + 0.000001, date'2024-01-01', timestamp'2024-01-01 10:00:00.000002 UTC', true),
 (cast(-1.50 as decimal(20,6)), date_add(date'0001-01-01', -1), timestamp'2024-01-01 10:00:00.000001 UTC', false),
 (cast(null as decimal(20,6)), cast(null as date), cast(null as timestamp), cast(null as boolean)),
 (cast(0 as decimal(20,6)), date'1970-01-01', timestamp'1970-01-01 00:00:00 UTC', false),
 (cast(0.000001 as decimal(20,6)), date_add(date'9999-12-31', 1), timestamp'1969-12-31 23:59:59.999999 UTC', false)
 as t(a, b, c, d)"""


def test_plain_key_ids_of_decimals_dates_timestamps_and_booleans_are_distinct_and_settings_free(spark):
    types = ["decimal(20,6)", "date", "timestamp", "boolean"]
    query = f"select {render(plain_key_id(['a', 'b', 'c', 'd'], None, types))} as h from {TYPED_KEYS}"
    settings = ("spark.sql.session.timeZone", "spark.sql.legacy.timeParserPolicy", "spark.sql.ansi.enabled")
    before = {k: spark.conf.get(k, None) for k in settings}
    seen = []
    try:
        for tz, policy, ansi in (
            ("UTC", "CORRECTED", "true"),
            ("America/New_York", "LEGACY", "false"),
            ("Asia/Kolkata", "EXCEPTION", "false"),
        ):
            spark.conf.set("spark.sql.session.timeZone", tz)
            spark.conf.set("spark.sql.legacy.timeParserPolicy", policy)
            spark.conf.set("spark.sql.ansi.enabled", ansi)
            seen.append([r.h for r in spark.sql(query).collect()])
    finally:
        for k, v in before.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)
    ids = seen[0]
    assert len(set(ids)) == len(ids) == 6
    assert seen[1] == ids and seen[2] == ids
    assert ids[0] == "1.500000|19723|1704103200000001|true" and ids[3] == "n|n|n|n"
    assert ids[4] == "0.000000|0|0|false" and ids[5].startswith("0.000001|2932897|")
    # A scale above 6 prints as `0E-18` or plainly by ANSI mode: such a key keeps the digest.
    assert plain_key_id(["a"], None, ["decimal(38,18)"]) is None
