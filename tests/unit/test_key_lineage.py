"""Keys listed from rows the dbt process holds (runtime/delta/embedded/key_lineage.py): a
relation's key column followed to the held columns it copies. The values found must hold every
value the relation has (NULL included), checked against duckdb running the same SQL; anything
the module does not follow answers None."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st

from python_helpers.runtime.delta.embedded import key_lineage

HELD = {"a", "b"}


def _sources(sql: str, column: str = "rk"):
    return key_lineage.sources(sqlglot.parse_one(sql, read="spark"), column, HELD)


@pytest.mark.parametrize(
    "sql, expected",
    [
        # The demo's shape: a filtered projection of a change.
        (
            "SELECT c_k AS rk FROM (SELECT * FROM (SELECT k AS c_k, g AS c_g FROM a) AS f WHERE c_g = 1) AS d",
            [("a", "k")],
        ),
        ("SELECT k AS rk FROM (SELECT k, SUM(w) AS s FROM a GROUP BY k HAVING SUM(w) <> 0) AS x", [("a", "k")]),
        ("SELECT f.k AS rk FROM a AS f", [("a", "k")]),
        ("SELECT k AS rk FROM a UNION ALL SELECT g AS other FROM b", [("a", "k"), ("b", "g")]),
        ("SELECT k AS rk FROM a EXCEPT SELECT k FROM b", [("a", "k")]),
        ("SELECT DISTINCT k AS rk FROM a WHERE k IN (SELECT g FROM b) LIMIT 3", [("a", "k")]),
        # A part of a union that filters another SELECT (keys below a grouping, NULLs dropped).
        (
            "SELECT k AS rk FROM a UNION ALL SELECT * FROM (SELECT g AS rk FROM b) AS x WHERE NOT (rk IS NULL)",
            [("a", "k"), ("b", "g")],
        ),
        ("SELECT * FROM (SELECT k AS rk FROM a) AS x WHERE rk > 0 UNION ALL SELECT g FROM b", [("a", "k"), ("b", "g")]),
    ],
)
def test_a_copied_key_is_followed_to_the_held_columns(sql, expected):
    assert _sources(sql) == expected


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT k + 1 AS rk FROM a",  # an expression
        "SELECT CAST(k AS INT) AS rk FROM a",
        "SELECT a.k AS rk FROM a JOIN b ON a.k = b.k",  # a join
        "SELECT k AS rk FROM (SELECT k FROM a GROUP BY ROLLUP (k)) AS x",  # NULL rows added
        "SELECT x.k AS rk FROM a AS f",  # another relation's column
        "SELECT k AS rk FROM m6",  # a relation not held
        "SELECT k AS rk FROM db.a",
        "SELECT k AS rk FROM a UNION ALL SELECT g + 1 FROM b",
        "SELECT k AS rk FROM a UNION ALL SELECT * FROM b JOIN a ON b.g = a.k",  # a join below a star
        "SELECT k AS rk FROM a UNION ALL SELECT * FROM (SELECT g + 1 AS rk FROM b) AS x",
        # A later part whose name at the position is repeated, or follows a star.
        "SELECT k AS rk, g AS rg FROM a UNION ALL SELECT g AS rk, k AS rk FROM b",
        "SELECT k AS rk, g AS rg FROM a UNION ALL SELECT *, k AS z FROM b",
        "SELECT k AS rk FROM a LATERAL VIEW EXPLODE(ARRAY(1, 2)) e AS n",
    ],
)
def test_anything_else_is_not_followed(sql):
    assert _sources(sql) is None


TABLE_ROWS = st.lists(
    st.tuples(st.one_of(st.none(), st.integers(-3, 3)), st.integers(-3, 3), st.integers(-2, 2)), max_size=6
)


def _table(rows: list) -> pa.Table:
    k, g, w = zip(*rows) if rows else ((), (), ())
    return pa.table({"k": pa.array(k, pa.int32()), "g": pa.array(g, pa.int32()), "w": pa.array(w, pa.int64())})


# How a relation of columns k and g is built from another ({inner}, and {other} for a second
# input): the forms the DVM's key SQL uses, and forms the module must refuse.
FORMS = [
    "SELECT * FROM ({inner}) AS t WHERE g > {n}",
    "SELECT g AS k, k AS g FROM ({inner}) AS t",
    "SELECT k + 1 AS k, g FROM ({inner}) AS t",
    "SELECT k, MAX(g) AS g FROM ({inner}) AS t GROUP BY k HAVING COUNT(*) > 0",
    "SELECT k, g FROM ({inner}) AS t GROUP BY ROLLUP (k, g)",
    "SELECT k, g FROM ({inner}) AS t UNION ALL SELECT g, k FROM ({other}) AS u",
    "SELECT k, g FROM ({inner}) AS t EXCEPT SELECT k, g FROM ({other}) AS u",
    "SELECT t.k, u.g FROM ({inner}) AS t LEFT JOIN ({other}) AS u ON t.k = u.k",
    "SELECT t.k AS k, t.g AS g FROM ({inner}) AS t",
    # NULLs filtered out (a key an `=` can meet): the values found may then leave NULL out.
    "SELECT * FROM ({inner}) AS t WHERE NOT (k IS NULL)",
    "SELECT g AS k, k AS g FROM ({inner}) AS t WHERE t.k IS NOT NULL AND g > {n}",
    "SELECT k, g FROM ({inner}) AS t WHERE NOT (k IS NULL) OR g > {n}",
    "SELECT k, g FROM ({inner}) AS t UNION ALL SELECT * FROM (SELECT k, g FROM ({other}) AS o) AS u WHERE NOT (g IS NULL)",
]


@st.composite
def relations(draw, depth: int = 0) -> str:
    """SQL of a relation with columns k and g over the held tables a and b."""
    if depth >= 3 or draw(st.booleans()) and depth > 0:
        table = draw(st.sampled_from(["a", "b"]))
        return draw(st.sampled_from([f"SELECT k, g FROM {table}", f"SELECT * FROM {table}"]))
    form = draw(st.sampled_from(FORMS))
    other = draw(relations(depth + 1)) if "{other}" in form else ""
    return form.format(inner=draw(relations(depth + 1)), other=other, n=draw(st.integers(-3, 3)))


@settings(max_examples=300, deadline=None)
@given(relation=relations(), a=TABLE_ROWS, b=TABLE_ROWS, column=st.sampled_from(["k", "g"]))
def test_the_values_found_hold_every_value_of_the_relation(relation, a, b, column):
    sql = f"SELECT {column} AS rk FROM ({relation}) AS z"
    held = {"a": _table(a), "b": _table(b)}
    found = key_lineage.held_values(sqlglot.parse_one(sql, read="spark"), ("rk",), held, 100)
    if found is None:
        return
    db = duckdb.connect()
    for name, rows in held.items():
        db.register(name, rows)
    actual = {row[0] for row in db.execute(sqlglot.transpile(sql, read="spark", write="duckdb")[0]).fetchall()}
    assert actual <= set(found["rk"].to_pylist()), sql


def test_a_key_filtered_by_is_not_null_lists_no_null():
    held = {"a": _table([(None, 0, 1), (2, 0, 1)]), "b": _table([(None, 1, 1), (3, None, 1)])}
    sql = (
        "SELECT * FROM (SELECT k AS rk FROM a) AS t WHERE NOT (rk IS NULL)"
        " UNION ALL SELECT g AS rk FROM (SELECT * FROM b WHERE b.g IS NOT NULL) AS u"
    )
    found = key_lineage.held_values(sqlglot.parse_one(sql, read="spark"), ("rk",), held, 10)
    assert sorted(found["rk"].to_pylist()) == [1, 2]
    # Without the filters, NULL is a key.
    plain = "SELECT k AS rk FROM a UNION ALL SELECT g FROM b"
    found = key_lineage.held_values(sqlglot.parse_one(plain, read="spark"), ("rk",), held, 10)
    assert found["rk"].null_count == 1


def test_past_the_bound_the_keys_are_not_listed_here():
    held = {"a": _table([(i, 0, 1) for i in range(5)]), "b": _table([])}
    relation = sqlglot.parse_one("SELECT k AS rk FROM a", read="spark")
    assert key_lineage.held_values(relation, ("rk",), held, 4) is None
    assert sorted(key_lineage.held_values(relation, ("rk",), held, 5)["rk"].to_pylist()) == [0, 1, 2, 3, 4]
