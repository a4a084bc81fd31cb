"""Calls the SQL parser cannot classify (user-defined functions, newer built-ins), classified by
asking Spark's function registry.

sqlglot parses a call it does not know as an anonymous function. Whether it is an aggregate (a
Python pandas UDAF, a Scala UserDefinedAggregateFunction or Aggregator, a Hive UDAF) decides the
operator tree: read as a scalar function over a delta it would aggregate the change rows alone,
a silently wrong result. So each such call is built once by the session's registry, over NULL
arguments (no job, no data), and the built expression says whether it is an aggregate and
whether it is deterministic (a Hive function, which needs typed arguments to be built, is
classified by its class instead). An aggregate becomes an `AnonymousAggFunc` (maintained by group
rescan, as any aggregate without an algebraic rule); a non-deterministic function, or a pandas
UDAF (which Spark will not compute beside the group's row count), makes the query
non-differentiable with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from sqlglot import exp

from python_helpers.errors import UnsupportedSql
from python_helpers.sql.aggregates import SPARK_AGGREGATE_NAMES


@dataclass(frozen=True)
class Kind:
    aggregate: bool
    deterministic: bool
    pandas: bool = False  # a pandas UDAF: Spark computes it only beside other pandas UDAFs
    unclassified: bool = False  # over SQL alone a user function cannot be told apart


# Base classes of aggregate functions, for functions the registry cannot build untyped (Hive).
_AGGREGATE_CLASSES = (
    "org.apache.spark.sql.catalyst.expressions.aggregate.AggregateFunction",
    "org.apache.hadoop.hive.ql.udf.generic.GenericUDAFResolver",
    "org.apache.hadoop.hive.ql.exec.UDAF",
    "org.apache.spark.sql.expressions.UserDefinedAggregateFunction",
)


def classify(spark, name: str, arity: int) -> Optional[Kind]:
    """None when Spark does not know the function (its analysis reports that later)."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: no JVM on this side
        return classify_by_sql(spark, name)
    database, _, func = name.rpartition(".")
    ident = jvm.org.apache.spark.sql.catalyst.FunctionIdentifier.apply(func, jvm.scala.Option.apply(database or None))
    try:
        registry = spark._jsparkSession.sessionState().functionRegistry()
        literal = getattr(jvm.org.apache.spark.sql.catalyst.expressions, "Literal$").__getattr__("MODULE$")
        null = literal.create(None, jvm.org.apache.spark.sql.types.DataTypes.NullType)
        args = jvm.java.util.ArrayList()
        for _ in range(arity):
            args.add(null)
        built = registry.lookupFunction(ident, jvm.scala.jdk.javaapi.CollectionConverters.asScala(args).toSeq())
        cls = built.getClass().getName()
        return Kind(
            aggregate=_is_instance(jvm, cls),
            deterministic=bool(built.deterministic()),
            pandas=cls.endswith(".PythonUDAF"),
        )
    except Exception:  # not buildable over untyped NULLs (Hive functions), or not in the session registry
        pass
    try:
        info = spark._jsparkSession.sessionState().catalog().lookupFunctionInfo(ident)
        return Kind(
            aggregate=_is_instance(jvm, info.getClassName()),
            deterministic=_hive_deterministic(jvm, info.getClassName()),
        )
    except Exception:
        return None


_BUILTIN_AGGREGATES = "org.apache.spark.sql.catalyst.expressions.aggregate."
_BUILTIN = "org.apache.spark.sql.catalyst.expressions."


def classify_by_sql(spark, name: str) -> Optional[Kind]:
    """Classify through `DESCRIBE FUNCTION EXTENDED` (SQL only: Spark Connect, Thrift).

    A built-in expression class says what it is; for any other function (a UDF, a Hive class)
    SQL does not tell whether it is deterministic or an aggregate, so it is taken as
    non-deterministic: the stream table refreshes in full, with that reason, rather than risk a
    wrong differential result."""
    try:
        rows = spark.sql(f"DESCRIBE FUNCTION EXTENDED {name}").collect()
    except Exception:  # noqa: BLE001 - not a function Spark knows: its analysis reports that later
        return None
    text = "\n".join(str(r[0]) for r in rows)
    if "not found" in text.lower():
        return None
    cls = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Class:")), "")
    if cls.startswith(_BUILTIN_AGGREGATES):
        return Kind(aggregate=True, deterministic=True)
    if cls.startswith(_BUILTIN):
        return Kind(aggregate=False, deterministic="rand" not in cls.lower() and "uuid" not in cls.lower())
    return Kind(aggregate=False, deterministic=False, unclassified=True)


def _hive_deterministic(jvm, class_name: str) -> bool:
    """A Hive function's @UDFType(deterministic=...) (deterministic when not annotated)."""
    try:
        annotation = jvm.java.lang.Class.forName(class_name).getAnnotation(
            jvm.java.lang.Class.forName("org.apache.hadoop.hive.ql.udf.UDFType")
        )
        return True if annotation is None else bool(annotation.deterministic())
    except Exception:  # not a Hive class, or Hive is not on the classpath
        return True


def _is_instance(jvm, class_name: str) -> bool:
    try:
        cls = jvm.java.lang.Class.forName(class_name)
    except Exception:
        return False
    for base in _AGGREGATE_CLASSES:
        try:
            if jvm.java.lang.Class.forName(base).isAssignableFrom(cls):
                return True
        except Exception:  # that library is not on the classpath
            continue
    return False


def mark_user_functions(spark, model: str, query: exp.Expr) -> tuple[exp.Expr, Optional[UnsupportedSql]]:
    """The query with user-defined aggregate calls marked as aggregates, and the reason it is not
    differentiable if it calls a non-deterministic function."""
    query = query.copy()
    cache: dict = {}
    problem = None
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
            cache[key] = classify(spark, name, len(node.expressions))
        kind = cache[key]
        if kind is None:
            continue
        if kind.unclassified and problem is None:
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
    return query, problem
