"""Constructs that can never be maintained differentially, or are not yet (checked before the tree is built)."""

from __future__ import annotations

from sqlglot import exp

from python_helpers.errors import UnsupportedSql

# Functions whose value is not a function of the input rows: a differential refresh would
# store values that a recompute would not reproduce (docs/supported-sql.md).
VOLATILE_FUNCTIONS = {
    "rand",
    "randn",
    "random",
    "uuid",
    "shuffle",
    "current_timestamp",
    "now",
    "current_date",
    "curdate",
    "localtimestamp",
    "current_timezone",
    "monotonically_increasing_id",
    "spark_partition_id",
    "input_file_name",
    "input_file_block_start",
    "input_file_block_length",
    "unix_timestamp_now",
    "try_reflect",
    "reflect",
    "java_method",
    "randstr",
    "uniform",
}

VOLATILE_EXPRESSIONS = (
    exp.Rand,
    exp.Randn,
    exp.Uuid,
    exp.CurrentTimestamp,
    exp.CurrentDate,
    exp.CurrentTime,
    exp.CurrentDatetime,
)


def function_name(node: exp.Expr) -> str:
    if isinstance(node, (exp.Anonymous, exp.AnonymousAggFunc)):
        return str(node.this).lower()
    return node.sql_name().lower() if hasattr(node, "sql_name") else node.key.lower()


# Aggregates whose result lists the group's values in an order Spark does not define (sqlglot
# parses collect_list as ArrayAgg, collect_set as ArrayUniqueAgg, listagg / string_agg as
# GroupConcat), and the functions that make such a list order-insensitive.
_ORDER_SENSITIVE_LISTS = (exp.ArrayAgg, exp.ArrayUniqueAgg)
_ORDER_SENSITIVE_NAMES = {"collect_list", "collect_set", "array_agg"}
_ORDER_INSENSITIVE = (exp.ArraySort, exp.ArraySize, exp.ArrayMax, exp.ArrayMin, exp.ArrayContains)
_ORDER_INSENSITIVE_NAMES = {
    "sort_array",
    "array_sort",
    "size",
    "cardinality",
    "array_max",
    "array_min",
    "array_contains",
}


def _unordered_list(node: exp.Expr) -> bool:
    """A collected list (or string) whose element order would be arbitrary in the result."""
    if isinstance(node, exp.GroupConcat):
        listed = not isinstance(node.this, exp.Order)  # WITHIN GROUP (ORDER BY ...) fixes the order
    else:
        listed = isinstance(node, _ORDER_SENSITIVE_LISTS) or (
            isinstance(node, exp.Anonymous) and function_name(node) in _ORDER_SENSITIVE_NAMES
        )
    if not listed:
        return False
    parent = node.parent
    while isinstance(parent, (exp.Paren, exp.Filter)):
        parent = parent.parent
    if isinstance(parent, exp.Window):
        return not parent.args.get("order")  # the window's ORDER BY orders it (ties aside, see docs)
    if isinstance(node, exp.GroupConcat):
        return True
    return not (
        isinstance(parent, _ORDER_INSENSITIVE)
        or (isinstance(parent, exp.Func) and function_name(parent) in _ORDER_INSENSITIVE_NAMES)
    )


def check_deterministic(model: str, query: exp.Expr) -> None:
    for node in query.walk():
        if _unordered_list(node):
            raise UnsupportedSql(
                model,
                f"{node.sql('spark')[:60]}: the order of the collected values is not "
                "deterministic (wrap it in sort_array / array_sort, or use WITHIN GROUP "
                "(ORDER BY ...))",
            )
        if isinstance(node, VOLATILE_EXPRESSIONS):
            raise UnsupportedSql(model, f"non-deterministic function {node.sql('spark')}")
        if isinstance(node, exp.Func) and function_name(node) in VOLATILE_FUNCTIONS:
            raise UnsupportedSql(model, f"non-deterministic function {function_name(node)}()")
        if isinstance(node, exp.TableSample):
            raise UnsupportedSql(model, "TABLESAMPLE (a sample is not a function of the data)")


def check_supported(model: str, query: exp.Expr) -> None:
    """Constructs outside this release's differential set, each named for the error message."""
    check_deterministic(model, query)
    for node in query.walk():
        if isinstance(node, exp.Limit) or isinstance(node, exp.Offset):
            raise UnsupportedSql(
                model,
                "LIMIT / OFFSET below the top level of the query (Top-K is maintained only as the query's last clause)",
            )
        if isinstance(node, (exp.Unnest, exp.Explode, exp.Posexplode)) and not isinstance(node.parent, exp.Lateral):
            raise UnsupportedSql(
                model,
                f"generator {node.sql('spark')[:60]} outside LATERAL (write it as "
                "FROM t LATERAL VIEW explode(...) x AS col "
                "or FROM t, LATERAL explode(...) AS x(col))",
            )
