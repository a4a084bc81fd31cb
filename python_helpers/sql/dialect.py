"""The Spark SQL dialect generated queries are printed in.

sqlglot's Spark generator lifts every nested WITH to the statement's top-level WITH clause. Spark
itself scopes a WITH inside a subquery, and two renderings of one recursive CTE (the old and the
new version of a WITH RECURSIVE, or a user's two subqueries each with a CTE named `r`) would
then collide as duplicate CTE names. This dialect keeps each WITH where it was written.
"""
from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.spark import Spark


class SparkScopedCtes(Spark):
    class Generator(Spark.Generator):
        EXPRESSIONS_WITHOUT_NESTED_CTES: set = set()


def spark_sql(expression: exp.Expression) -> str:
    return expression.sql(SparkScopedCtes)
