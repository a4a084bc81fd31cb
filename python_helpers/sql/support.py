"""Constructs that can never be maintained differentially, or are not yet (checked before the tree is built)."""
from __future__ import annotations

from sqlglot import exp

from python_helpers.errors import UnsupportedSql

# Functions whose value is not a function of the input rows: a differential refresh would
# store values that a recompute would not reproduce (DESIGN.md section 7).
VOLATILE_FUNCTIONS = {
    "rand", "randn", "random", "uuid", "shuffle", "current_timestamp", "now", "current_date",
    "curdate", "localtimestamp", "current_timezone", "monotonically_increasing_id",
    "spark_partition_id", "input_file_name", "input_file_block_start", "input_file_block_length",
    "unix_timestamp_now", "try_reflect", "reflect", "java_method", "randstr", "uniform",
}

VOLATILE_EXPRESSIONS = (exp.Rand, exp.Randn, exp.Uuid, exp.CurrentTimestamp, exp.CurrentDate,
                        exp.CurrentTime, exp.CurrentDatetime)


def function_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower()
    return node.sql_name().lower() if hasattr(node, "sql_name") else node.key.lower()


def check_deterministic(model: str, query: exp.Expression) -> None:
    for node in query.walk():
        if isinstance(node, VOLATILE_EXPRESSIONS):
            raise UnsupportedSql(model, f"non-deterministic function {node.sql('spark')}")
        if isinstance(node, exp.Func) and function_name(node) in VOLATILE_FUNCTIONS:
            raise UnsupportedSql(model, f"non-deterministic function {function_name(node)}()")
        if isinstance(node, exp.TableSample):
            raise UnsupportedSql(model, "TABLESAMPLE (a sample is not a function of the data)")


def check_supported(model: str, query: exp.Expression) -> None:
    """Constructs outside this release's differential set, each named for the error message."""
    check_deterministic(model, query)
    for node in query.walk():
        if isinstance(node, exp.Window):
            raise UnsupportedSql(model, f"window function {node.sql('spark')[:80]}")
        if isinstance(node, exp.Lateral):
            raise UnsupportedSql(model, "LATERAL VIEW / LATERAL subquery")
        if isinstance(node, (exp.Intersect, exp.Except)):
            raise UnsupportedSql(model, f"{node.key.upper()} set operation")
        if isinstance(node, (exp.Exists,)):
            raise UnsupportedSql(model, "EXISTS subquery")
        if isinstance(node, exp.In) and node.args.get("query") is not None:
            raise UnsupportedSql(model, "IN (subquery)")
        if isinstance(node, exp.Subquery) and not _is_from_item(node):
            raise UnsupportedSql(model, "scalar subquery in an expression")
        if isinstance(node, (exp.Cube, exp.Rollup, exp.GroupingSets)):
            raise UnsupportedSql(model, "GROUPING SETS / ROLLUP / CUBE")
        if isinstance(node, exp.Limit) or isinstance(node, exp.Offset):
            raise UnsupportedSql(model, "LIMIT / OFFSET (Top-K)")
        if isinstance(node, exp.With) and node.args.get("recursive"):
            raise UnsupportedSql(model, "WITH RECURSIVE")
        if isinstance(node, exp.Unnest) or isinstance(node, exp.Explode):
            raise UnsupportedSql(model, f"generator {node.sql('spark')[:60]}")


def _is_from_item(node: exp.Subquery) -> bool:
    parent = node.parent
    return isinstance(parent, (exp.From, exp.Join)) or isinstance(parent, exp.Union)
