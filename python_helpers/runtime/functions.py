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


# Base classes of aggregate functions, for functions the registry cannot build untyped (Hive).
_AGGREGATE_CLASSES = (
    "org.apache.spark.sql.catalyst.expressions.aggregate.AggregateFunction",
    "org.apache.hadoop.hive.ql.udf.generic.GenericUDAFResolver",
    "org.apache.hadoop.hive.ql.exec.UDAF",
    "org.apache.spark.sql.expressions.UserDefinedAggregateFunction",
)


def classify(spark, name: str, arity: int) -> Optional[Kind]:
    """None when Spark does not know the function (its analysis reports that later)."""
    jvm = spark._jvm
    ident = jvm.org.apache.spark.sql.catalyst.FunctionIdentifier.apply(name.split(".")[-1])
    try:
        registry = spark._jsparkSession.sessionState().functionRegistry()
        literal = getattr(jvm.org.apache.spark.sql.catalyst.expressions, "Literal$").__getattr__("MODULE$")
        null = literal.create(None, jvm.org.apache.spark.sql.types.DataTypes.NullType)
        args = jvm.java.util.ArrayList()
        for _ in range(arity):
            args.add(null)
        built = registry.lookupFunction(ident, jvm.scala.jdk.javaapi.CollectionConverters.asScala(args).toSeq())
        cls = built.getClass().getName()
        return Kind(aggregate=_is_instance(jvm, cls), deterministic=bool(built.deterministic()),
                    pandas=cls.endswith(".PythonUDAF"))
    except Exception:  # not buildable over untyped NULLs (Hive functions), or not in the session registry
        pass
    try:
        info = spark._jsparkSession.sessionState().catalog().lookupFunctionInfo(ident)
        return Kind(aggregate=_is_instance(jvm, info.getClassName()), deterministic=True)
    except Exception:
        return None


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


def mark_user_functions(spark, model: str, query: exp.Expression) -> tuple[exp.Expression, Optional[UnsupportedSql]]:
    """The query with user-defined aggregate calls marked as aggregates, and the reason it is not
    differentiable if it calls a non-deterministic function."""
    query = query.copy()
    cache: dict = {}
    problem = None
    for node in list(query.find_all(exp.Anonymous)):
        name = str(node.this).lower()
        if name in SPARK_AGGREGATE_NAMES:
            continue
        key = (name, len(node.expressions))
        if key not in cache:
            cache[key] = classify(spark, name, len(node.expressions))
        kind = cache[key]
        if kind is None:
            continue
        if not kind.deterministic and problem is None:
            problem = UnsupportedSql(model, f"non-deterministic function {name}()")
        if kind.pandas and problem is None:
            problem = UnsupportedSql(model, f"pandas aggregate UDF {name}() (Spark computes it only beside other "
                                            "pandas UDAFs, not beside the row count a stream table keeps)")
        if kind.aggregate:
            node.replace(exp.AnonymousAggFunc(this=node.this, expressions=[e.copy() for e in node.expressions]))
    return query, problem
