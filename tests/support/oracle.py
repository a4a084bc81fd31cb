"""The oracle: a stream table must equal its query recomputed on the sources.

`assert_matches_recompute` reads the stream table through its user-facing view and recomputes
the model's SQL independently of the refresh engine: every source is read with the `deltalake` package
at its latest version, handed to Spark as a temp view with a unique name, and the SQL is run with
its `schema.table` references replaced (sqlglot, dialect spark) by those temp views. The two
results are compared as multisets.

Value normalisation for the comparison:
- floats: equal within a tolerance (relative 1e-9, absolute 1e-9; shown rounded to 9 significant
  digits) -- algebraic AVG/STDDEV/VAR maintained from running sums differ from a recompute in
  the last bits;
- NaN equals NaN, -0.0 equals 0.0, NULL equals NULL;
- decimals exactly (Decimal('1.5') == Decimal('1.50'); the scale is checked through the types);
- arrays/structs/maps recursively (arrays keep their order: sort them in the SQL if needed).
"""

from __future__ import annotations

import datetime
import decimal
import math
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import sqlglot
from sqlglot import exp

from python_helpers.runtime.spark_types import normalize_schema, spark_schema

FLOAT_DIGITS = 9
REL_TOL = 1e-9
ABS_TOL = 1e-9
MAX_ROWS_SHOWN = 40


class _NaN:
    """Stands for a float NaN so that NaN == NaN inside the Counter."""

    def __eq__(self, other):
        return isinstance(other, _NaN)

    def __hash__(self):
        return hash("__NaN__")

    def __repr__(self):
        return "NaN"


NAN = _NaN()


def normalize_value(value, digits: int = FLOAT_DIGITS):
    """A hashable, comparison-friendly form of one cell value."""
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return NAN
        if math.isinf(value):
            return value
        if value == 0.0:
            return 0.0
        return float(f"{value:.{digits}g}")
    if isinstance(value, (int, str, bytes, decimal.Decimal, datetime.date, datetime.datetime)):
        return value
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, dict):
        return ("__map__",) + tuple(
            sorted(((normalize_value(k, digits), normalize_value(v, digits)) for k, v in value.items()), key=repr)
        )
    if hasattr(value, "asDict"):  # pyspark Row (struct)
        return ("__struct__",) + tuple(normalize_value(v, digits) for v in value)
    if isinstance(value, (list, tuple)):
        return ("__array__",) + tuple(normalize_value(v, digits) for v in value)
    return value


def normalize_row(row, digits: int = FLOAT_DIGITS) -> tuple:
    return tuple(normalize_value(v, digits) for v in row)


def _rounded(value, digits: int):
    """A normalised value with its floats rounded to `digits` significant digits (for display)."""
    if isinstance(value, float) and math.isfinite(value) and value != 0.0:
        return float(f"{value:.{digits}g}")
    if isinstance(value, tuple):
        return tuple(_rounded(v, digits) for v in value)
    return value


def _close(a, b) -> bool:
    """Cell equality with float tolerance (a, b are normalised values)."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isinf(a) or math.isinf(b):
            return a == b
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return a == b


def _pair_tolerant(missing: Counter, extra: Counter):
    """Cancel missing/extra rows that are equal up to the float tolerance."""
    missing, extra = Counter(missing), Counter(extra)
    for m in list(missing):
        for e in list(extra):
            if missing[m] <= 0:
                break
            if extra[e] <= 0 or not _close(m, e):
                continue
            n = min(missing[m], extra[e])
            missing[m] -= n
            extra[e] -= n
    return +missing, +extra


@dataclass
class Comparison:
    columns: list
    expected_count: int
    actual_count: int
    missing: Counter = field(default_factory=Counter)  # in the recompute, not in the stream table
    extra: Counter = field(default_factory=Counter)  # in the stream table, not in the recompute

    @property
    def ok(self) -> bool:
        return not self.missing and not self.extra

    def describe(self) -> str:
        lines = [
            f"stream table has {self.actual_count} rows, recompute has {self.expected_count} rows",
            f"columns: {self.columns}",
        ]
        for title, rows in (
            ("MISSING from the stream table (present in the recompute)", self.missing),
            ("EXTRA in the stream table (absent from the recompute)", self.extra),
        ):
            if not rows:
                continue
            lines.append(f"{title}: {sum(rows.values())} rows")
            for i, (row, n) in enumerate(sorted(rows.items(), key=lambda kv: repr(kv[0]))):
                if i >= MAX_ROWS_SHOWN:
                    lines.append(f"  ... {len(rows) - MAX_ROWS_SHOWN} more distinct rows")
                    break
                lines.append(f"  {n} x {row!r}")
        return "\n".join(lines)


def compare_rows(actual: Iterable, expected: Iterable, columns=None, digits: int = FLOAT_DIGITS) -> Comparison:
    """Multiset comparison of two row collections (pyspark Rows or tuples).

    Rows are counted exactly (floats at full precision); rows left over on both sides are then
    paired up if they are equal within the float tolerance. (Rounding to `digits` significant
    digits before counting would split values that straddle a rounding boundary.)
    """
    actual_c = Counter(normalize_row(r, 17) for r in actual)
    expected_c = Counter(normalize_row(r, 17) for r in expected)
    missing = expected_c - actual_c
    extra = actual_c - expected_c
    if missing and extra:
        missing, extra = _pair_tolerant(missing, extra)

    def shown(rows: Counter) -> Counter:
        out: Counter = Counter()
        for r, n in rows.items():
            out[_rounded(r, digits)] += n
        return out

    return Comparison(
        columns=list(columns or []),
        expected_count=sum(expected_c.values()),
        actual_count=sum(actual_c.values()),
        missing=shown(missing) if missing else missing,
        extra=shown(extra) if extra else extra,
    )


# ---------------------------------------------------------------------------------------------
# Recompute


def _source_key(table: exp.Table) -> str:
    parts = [p for p in (table.args.get("catalog"), table.args.get("db"), table.this) if p is not None]
    return ".".join(p.name for p in parts).lower()


def rewrite_sources(sql: str, replacements: Mapping[str, str]) -> str:
    """Replace `schema.table` references in sql (keys lower-case) by the given (temp view) names.

    A reference keeps its alias; an unaliased one gets its own table name as alias, so that
    qualified column references (`t1.k`) still resolve. Any qualified table reference that is
    not in `replacements` is an error (the oracle must never read the stream table or some
    other table by accident). CTE references are unqualified and left alone.
    """
    tree = sqlglot.parse_one(sql, read="spark")
    cte_names = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    unknown = []

    def swap(node):
        if not isinstance(node, exp.Table) or not node.name:
            return node
        key = _source_key(node)
        if key in replacements:
            alias = node.alias or node.name
            new = exp.to_table(replacements[key])
            return exp.alias_(new, alias, table=True) if alias else new
        if "." in key or key not in cte_names:
            unknown.append(key)
        return node

    new_tree = tree.transform(swap)
    if unknown:
        raise AssertionError(
            f"oracle: the SQL references tables that are not known sources: {sorted(set(unknown))}; "
            f"known: {sorted(replacements)}"
        )
    return new_tree.sql(dialect="spark")


class SourceReads:
    """The oracle's reads of the sources, kept while a source stays at one version.

    A source version is read once with the `deltalake` package and handed to Spark as a temp
    view; checks of several stream tables over the same sources (a family of shapes, the 22
    TPC-H queries) reuse it until the source moves. Keyed by the Delta table's id and version,
    so a table recreated at the same path is read anew. Nothing of the refresh engine is involved.
    """

    def __init__(self, spark):
        self.spark = spark
        self._views: dict = {}  # path -> ((table id, version), temp view)

    def view(self, path: str) -> str:
        from deltalake import DeltaTable

        table = DeltaTable(path)
        key = (str(table.metadata().id), table.version())
        known = self._views.get(path)
        if known is not None and known[0] == key:
            return known[1]
        if known is not None:
            self.spark.catalog.dropTempView(known[1])
        view = f"__oracle_{uuid.uuid4().hex[:12]}"
        data = table.to_pyarrow_table()
        # Spark Connect cannot infer a schema from no rows: give it the table's.
        frame = (
            self.spark.createDataFrame(data)
            if data.num_rows
            else self.spark.createDataFrame([], spark_schema(normalize_schema(data.schema)))
        )
        frame.createOrReplaceTempView(view)
        self._views[path] = (key, view)
        return view

    def close(self) -> None:
        for _, view in self._views.values():
            self.spark.catalog.dropTempView(view)
        self._views.clear()


def recompute(spark, sql: str, source_paths: Mapping[str, str], reads: "SourceReads | None" = None):
    """Run sql on fresh reads of the sources. Returns (DataFrame, [temp view names to drop]);
    with `reads`, the sources come from its views (which it drops itself)."""
    own = reads is None
    reads = reads or SourceReads(spark)
    replacements = {name.lower(): reads.view(path) for name, path in sorted(source_paths.items())}
    views = [view for view in replacements.values()] if own else []
    return spark.sql(rewrite_sources(sql, replacements)), views


def _type_strings(schema):
    return [(f.name.lower(), f.dataType.simpleString()) for f in schema.fields]


def compare_with_recompute(
    spark,
    view_name: str,
    sql: str,
    source_paths: Mapping[str, str],
    check_types: bool = True,
    reads: "SourceReads | None" = None,
):
    """Compare stream table view_name with the recomputed query. Returns (Comparison, problems)."""
    actual_df = spark.table(view_name)
    expected_df, views = recompute(spark, sql, source_paths, reads)
    try:
        problems = []
        a_cols = [c.lower() for c in actual_df.columns]
        e_cols = [c.lower() for c in expected_df.columns]
        if a_cols != e_cols:
            problems.append(f"columns differ: stream table {actual_df.columns} vs query {expected_df.columns}")
        elif check_types and _type_strings(actual_df.schema) != _type_strings(expected_df.schema):
            problems.append(
                "column types differ: stream table "
                f"{_type_strings(actual_df.schema)} vs query {_type_strings(expected_df.schema)}"
            )
        comparison = compare_rows(actual_df.collect(), expected_df.collect(), columns=expected_df.columns)
    finally:
        for v in views:
            spark.catalog.dropTempView(v)
    return comparison, problems


def assert_matches_recompute(
    spark,
    view_name: str,
    sql: str,
    source_paths: Mapping[str, str],
    check_types: bool = True,
    context: str = "",
    reads: "SourceReads | None" = None,
) -> Comparison:
    """Assert that the stream table read through view_name equals sql recomputed on the sources
    (`reads`: source reads shared with other checks, see SourceReads)."""
    comparison, problems = compare_with_recompute(spark, view_name, sql, source_paths, check_types, reads)
    if problems or not comparison.ok:
        head = f"stream table {view_name} does not match its query recomputed on the sources"
        if context:
            head += f" [{context}]"
        raise AssertionError("\n".join([head, *problems, comparison.describe(), "SQL:", sql]))
    return comparison
