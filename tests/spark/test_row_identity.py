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
    query = f"select {render(key_id(['a', 'b'], types=['bigint', 'string']))} as h from values {rows} as t(a, b)"
    ids = [r.h for r in spark.sql(query).collect()]
    assert [_decode(h) for h in ids] == PLAIN_KEYS
    assert len(set(ids)) == len(ids)
    assert ids[0] == "1|3:2|3" and ids[4] == "n|n"
    # One integer column is its digits; any other type keeps the JSON form.
    assert render(key_id(["a"], types=["int"])) == "COALESCE(CAST(a AS STRING), 'n')"
    assert "TO_JSON" in render(key_id(["a", "b"], types=["bigint", "date"]))
