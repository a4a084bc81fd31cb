"""Column types beyond the common test schema, through a differential refresh and the oracle:
timestamps (UTC and without zone), booleans, awkward strings, wide decimals, special floats,
and nested source columns (struct, array, map) read by the query."""

from __future__ import annotations

import datetime
import decimal

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

pytestmark = pytest.mark.spark

UTC = datetime.timezone.utc

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("ntz", pa.timestamp("us")),
        ("flag", pa.bool_()),
        ("s", pa.string()),
        ("big", pa.decimal128(38, 18)),
        ("f", pa.float64()),
        ("small", pa.int8()),
        ("pt", pa.struct([("a", pa.int32()), ("b", pa.string())])),
        ("tags", pa.list_(pa.string())),
        ("attrs", pa.map_(pa.string(), pa.int64())),
    ]
)


def _row(i, ts, flag, s, big, f, small=1, a=1, b="x", tags=("t",), attrs=None):
    return {
        "id": i,
        "ts": ts,
        "ntz": None if ts is None else ts.replace(tzinfo=None) + datetime.timedelta(hours=5),
        "flag": flag,
        "s": s,
        "big": None if big is None else decimal.Decimal(big),
        "f": f,
        "small": small,
        "pt": None if a is None else {"a": a, "b": b},
        "tags": None if tags is None else list(tags),
        "attrs": None if attrs is None else list(attrs.items()),
    }


def _t(day, hour, minute=0, micro=0):
    return datetime.datetime(2024, 3, day, hour, minute, 0, micro, tzinfo=UTC)


ROWS = [
    _row(1, _t(30, 23, 59, 999999), True, "plain", "1234567890.123456789012345678", 1.5),
    _row(2, _t(31, 0, 0, 1), False, 'it\'s "quoted"', "-0.000000000000000001", float("nan"), tags=()),
    _row(3, _t(31, 1), None, "ünïcødé ✓", "1", float("inf"), small=-128, attrs={"k": 1}),
    _row(4, None, True, "", None, -0.0, small=127, a=None, tags=None),
    _row(5, _t(30, 22), True, None, "9999999999.999999999999999999", float("-inf"), b=None),
    _row(6, _t(30, 22), True, "plain", "1", 1.5),
]

QUERIES = {
    "types_project": """
        SELECT id, ts, ntz, date_trunc('HOUR', ts) AS hour, to_date(ts) AS day, flag, NOT flag AS nflag,
               concat(s, '|') AS s2, length(s) AS len, big, big * 2 AS big2, f, small,
               pt.a AS pa, pt.b AS pb, size(tags) AS ntags, element_at(attrs, 'k') AS ak
        FROM {src}.typed WHERE id <> 999""",
    "types_group": """
        SELECT to_date(ts) AS day, flag, COUNT(*) AS n, SUM(big) AS sb, MAX(ts) AS last_ts,
               MIN(ntz) AS first_ntz, MAX(s) AS ms, SUM(small) AS ss
        FROM {src}.typed GROUP BY to_date(ts), flag""",
    # Keys of a decimal of scale 6, an instant and a boolean (each row identified by its plain
    # text, sqlgen.plain_key_id), NULLs among them; and of a scale-18 decimal (its digest).
    "types_group_keys": """
        SELECT CAST(big AS DECIMAL(30, 6)) AS big6, ts, flag, COUNT(*) AS n, SUM(small) AS ss
        FROM {src}.typed GROUP BY CAST(big AS DECIMAL(30, 6)), ts, flag""",
    "types_group_wide_decimal": """
        SELECT big, flag, COUNT(*) AS n FROM {src}.typed GROUP BY big, flag""",
    "types_distinct": "SELECT DISTINCT flag, date_trunc('DAY', ntz) AS d, pt.a AS pa FROM {src}.typed",
    # Both inputs changed: each is read once for the changed keys and its old rows are the new
    # ones minus the change, which must match value for value in every type read.
    "types_outer": """
        SELECT a.id, a.ts, a.ntz, a.flag, a.big, a.f, a.small, a.pt.a AS pa, size(a.tags) AS nt, b.id AS bid
        FROM {src}.typed a LEFT JOIN {src}.typed b ON a.s = b.s AND a.id <> b.id""",
    "types_join": """
        SELECT a.id, b.id AS bid, a.ts, b.s FROM {src}.typed a JOIN {src}.typed b
        ON a.s = b.s AND a.id < b.id""",
}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_types_survive_differential_refresh(env, name):
    path = env.source_path("typed")
    import os

    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_deltalake(
        path, pa.Table.from_pylist(ROWS, schema=SCHEMA), configuration={"delta.enableChangeDataFeed": "true"}
    )
    env.paths["typed"] = path
    stream = env.stream(name, QUERIES[name])
    stream.refresh(expect="full")
    stream.check()

    # Insert a duplicate and new values, update across day boundaries and to NULL, delete.
    write_deltalake(
        path,
        pa.Table.from_pylist(
            [
                ROWS[0],
                _row(7, _t(31, 0, 0, 0), False, "plain", "0.000000000000000001", 2.25, tags=("a", "b"), attrs={"k": 7}),
            ],
            schema=SCHEMA,
        ),
        mode="append",
    )
    DeltaTable(path).update(
        updates={"ts": "CAST('2024-03-29 12:00:00' AS TIMESTAMP)", "flag": "NULL"}, predicate="id = 3"
    )
    DeltaTable(path).update(updates={"s": "'plain'", "big": "NULL"}, predicate="id = 2")
    DeltaTable(path).delete("id = 5")
    env.log.append("typed batch 1")
    stream.refresh(expect="differential")
    stream.check()

    DeltaTable(path).delete("flag = true")
    DeltaTable(path).update(updates={"f": "CAST(1.5 AS DOUBLE)", "small": "CAST(-1 AS TINYINT)"}, predicate="id = 7")
    env.log.append("typed batch 2")
    stream.refresh(expect="differential")
    stream.check()
