"""Calls the SQL parser cannot classify (user-defined functions, newer built-ins), classified by
asking Spark's function registry.

sqlglot parses a call it does not know as an anonymous function. Whether it is an aggregate (a
Python pandas UDAF, a Scala UserDefinedAggregateFunction or Aggregator, a Hive UDAF) decides the
operator tree: read as a scalar function over a delta it would aggregate the change rows alone,
a silently wrong result. So each such call is classified by the connection: an in-process session
builds it in its function registry (runtime/connections/spark.py), a connection without a JVM asks
`DESCRIBE FUNCTION EXTENDED` (classify_by_sql). An aggregate becomes an `AnonymousAggFunc` (maintained by group
rescan, as any aggregate without an algebraic rule); a non-deterministic function, or a pandas
UDAF (which Spark will not compute beside the group's row count), makes the query
non-differentiable with that reason.
"""

from __future__ import annotations

from typing import Optional

from sqlglot import exp

from python_helpers.errors import UnsupportedSql
from python_helpers.runtime.connections.base import Connection, FunctionKind
from python_helpers.sql.aggregates import SPARK_AGGREGATE_NAMES


def classify(conn: Connection, name: str, arity: int) -> Optional[FunctionKind]:
    """None when Spark does not know the function (its analysis reports that later)."""
    return conn.classify_function(name, arity)


_BUILTIN_AGGREGATES = "org.apache.spark.sql.catalyst.expressions.aggregate."
_BUILTIN = "org.apache.spark.sql.catalyst.expressions."


def classify_by_sql(conn: Connection, name: str) -> Optional[FunctionKind]:
    """Classify through `DESCRIBE FUNCTION EXTENDED` (SQL only: Spark Connect, Thrift).

    A built-in expression class says what it is; for any other function (a UDF, a Hive class)
    SQL does not tell whether it is deterministic or an aggregate, so it is taken as
    non-deterministic: the stream table refreshes in full, with that reason, rather than risk a
    wrong differential result."""
    try:
        rows = conn.rows(f"DESCRIBE FUNCTION EXTENDED {name}")
    except Exception:  # noqa: BLE001 - not a function Spark knows: its analysis reports that later
        return None
    text = "\n".join(str(r[0]) for r in rows)
    if "not found" in text.lower():
        return None
    cls = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Class:")), "")
    if cls.startswith(_BUILTIN_AGGREGATES):
        return FunctionKind(aggregate=True, deterministic=True)
    if cls.startswith(_BUILTIN):
        return FunctionKind(aggregate=False, deterministic="rand" not in cls.lower() and "uuid" not in cls.lower())
    return FunctionKind(aggregate=False, deterministic=False, unclassified=True)


def mark_user_functions(
    conn: Connection, model: str, query: exp.Expr
) -> tuple[exp.Expr, Optional[UnsupportedSql], dict]:
    """The query with user-defined aggregate calls marked as aggregates, the reason it is not
    differentiable if it calls a non-deterministic function, and {function name: digest of its
    code} of the user functions it calls (where the connection can tell: `method: session`)."""
    query = query.copy()
    cache: dict = {}
    problem = None
    codes: dict = {}
    for node in list(query.find_all(exp.Anonymous)):
        name = str(node.this).lower()
        parent = node.parent
        qualified = isinstance(parent, exp.Dot) and node.arg_key == "expression"
        if isinstance(parent, exp.Dot) and qualified:
            name = f"{parent.this.name.lower()}.{name}"
        elif name in SPARK_AGGREGATE_NAMES:
            continue
        key = (name, len(node.expressions))
        if key not in cache:
            cache[key] = classify(conn, name, len(node.expressions))
        kind = cache[key]
        if kind is None:
            continue
        if kind.code is not None:
            codes[name] = kind.code
        if kind.code == "unknown" and problem is None:
            problem = UnsupportedSql(
                model,
                f"user function {name}(): its code cannot be fingerprinted, so a change to it in a deploy "
                "could not be seen",
            )
        elif kind.unclassified and problem is None:
            problem = UnsupportedSql(
                model,
                f"user function {name}(): over this connection Spark does not say "
                "whether it is deterministic or an aggregate",
            )
        elif not kind.deterministic and problem is None:
            problem = UnsupportedSql(model, f"non-deterministic function {name}()")
        if kind.pandas and problem is None:
            problem = UnsupportedSql(
                model,
                f"pandas aggregate UDF {name}() (Spark computes it only beside other "
                "pandas UDAFs, not beside the row count a stream table keeps)",
            )
        if kind.aggregate and qualified and problem is None:
            problem = UnsupportedSql(
                model,
                f"aggregate function {name}() called with its database (call it "
                "unqualified, from the database it is registered in)",
            )
        elif kind.aggregate:
            node.replace(exp.AnonymousAggFunc(this=node.this, expressions=[e.copy() for e in node.expressions]))
    return query, problem, codes
