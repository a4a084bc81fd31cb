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
    # sqlglot binds Spark.Generator as a class attribute, which mypy does not accept as a base;
    # importing the generator class by its module path would tie this to one sqlglot layout.
    class Generator(Spark.Generator):  # type: ignore[misc,valid-type]
        EXPRESSIONS_WITHOUT_NESTED_CTES: set = set()


def spark_sql(expression: exp.Expr) -> str:
    return expression.sql(SparkScopedCtes)
