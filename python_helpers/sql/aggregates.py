"""Which function calls are aggregates (sqlglot parses some Spark aggregates as plain calls)."""

from __future__ import annotations

from sqlglot import exp

from python_helpers.sql.support import function_name

# Aggregates sqlglot parses as Anonymous but Spark treats as aggregates.
SPARK_AGGREGATE_NAMES = {
    "std",
    "every",
    "some",
    "any",
    "bool_and",
    "bool_or",
    "bit_and",
    "bit_or",
    "bit_xor",
    "count_if",
    "collect_list",
    "collect_set",
    "percentile",
    "percentile_approx",
    "approx_percentile",
    "median",
    "mode",
    "kurtosis",
    "skewness",
    "any_value",
    "max_by",
    "min_by",
    "corr",
    "covar_pop",
    "covar_samp",
    "regr_avgx",
    "regr_avgy",
    "regr_count",
    "regr_intercept",
    "regr_r2",
    "regr_slope",
    "regr_sxx",
    "regr_sxy",
    "regr_syy",
    "approx_count_distinct",
    "histogram_numeric",
    "try_sum",
    "try_avg",
    "array_agg",
    "listagg",
    "string_agg",
    "count_min_sketch",
    "hll_sketch_agg",
    "hll_union_agg",
    "percentile_cont",
    "percentile_disc",
    "first",
    "last",
    "first_value",
    "last_value",
}
# Without an ordering these pick an arbitrary row, so a recompute may disagree with any stored value.
ORDER_DEPENDENT_AGGREGATES = {"first", "last", "first_value", "last_value", "any_value"}


def is_aggregate(node: exp.Expr) -> bool:
    if isinstance(node, exp.AggFunc):
        return True
    return isinstance(node, exp.Anonymous) and function_name(node) in SPARK_AGGREGATE_NAMES


def window_function(node: exp.Expr) -> bool:
    """The function a window applies (SUM in SUM(x) OVER (...)), as opposed to a group aggregate."""
    return isinstance(node.parent, exp.Window) and node.arg_key == "this"


def group_aggregates(expression: exp.Expr) -> list:
    return [n for n in expression.walk() if is_aggregate(n) and not window_function(n)]
