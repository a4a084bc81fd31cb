"""Statements over Spark Connect that carry the views they read with them.

A Spark Connect statement may name relations it brings along (a SQL relation with references,
as pyspark's own `spark.sql("... {df} ...", df=df)` sends them), and the server resolves those
names for that statement alone. A refresh binds its change rows and its checkpointed
intermediates this way: no temporary view to create beforehand or drop after, each of which
is a round trip.

The classes used are pyspark's Spark Connect plan nodes (`SQL`, `SubqueryAlias`); the public
route to them would rewrite the statement's text into a format string.
"""

from __future__ import annotations

from typing import Any


def _plan(sql: str, views: dict):
    from pyspark.sql.connect.plan import SQL, SubqueryAlias

    return SQL(sql, [], {}, [SubqueryAlias(frame._plan, name) for name, frame in sorted(views.items())])


def query(spark: Any, sql: str, views: dict):
    """The frame of query `sql`, reading `views` ({name: frame})."""
    from pyspark.sql.connect.dataframe import DataFrame

    return DataFrame(_plan(sql, views), spark)


def execute(spark: Any, sql: str, views: dict) -> None:
    """Run statement `sql` (DDL or DML), reading `views` ({name: frame})."""
    spark.client.execute_command(_plan(sql, views).command(spark.client))
