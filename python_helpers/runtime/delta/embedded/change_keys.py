"""A source change's keys as what a keyed read filters by (embedded engine): a key list as
`IN`, a change of too many keys as a few [min, max] ranges, several changes' keys together."""

from __future__ import annotations

from typing import Optional

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from python_helpers.runtime.delta.bound_views import DATE, INTEGRAL, key_in

# A change with more keys than bindings.MAX_KEYS (or too large to fetch them) is summed up as
# at most this many [min, max] ranges of its keys, one per slice of its key span: new and
# expiring business keys form a few runs, and the files between them are still skipped.
KEY_RANGES = 1024
# Up to this many keys a keyed read that statistics leave most files to is read with Arrow in
# the dbt process (bindings' keyed snapshot): few keys meet few row groups, so it reads little
# more than the key column; with many scattered keys nearly every row group holds one, and the
# dbt process would read what Spark reads, on fewer cores (TPC-H's 1,000 scattered orders).
ARROW_KEYED_MAX_KEYS = 64


def read_with_arrow(keys: int, kept_files: int, every_file: int) -> bool:
    """Read a keyed input's rows for `keys` distinct non-null keys with Arrow rather than Spark,
    where the files' min/max statistics keep `kept_files` of `every_file`? Only for a few keys
    scattered over more than half the files: where statistics rule out most files, Spark reads
    the few left and Parquet skips their pages."""
    return 0 < keys <= ARROW_KEYED_MAX_KEYS and kept_files * 2 > every_file


def key_filter(column: str, keys, schema) -> Optional[exp.Expr]:
    """`column IN (keys)` (bound_views.key_in) for the distinct non-null integer or date `keys`
    (an Arrow array) of an integer or date `column` of `schema` (Arrow). Strings are left out:
    Arrow does not say a column's collation, under which `IN` and the join compare alike."""
    if column not in schema.names:
        return None
    values = list(set(pc.drop_null(keys).to_pylist()))
    return key_in(column, values, _key_kind(schema.field(column).type), _key_kind(keys.type))


def _key_kind(arrow_type) -> Optional[str]:
    if pa.types.is_integer(arrow_type):
        return INTEGRAL
    return DATE if pa.types.is_date32(arrow_type) else None


def ranges_query(change: exp.Table, column: str, is_date: bool) -> exp.Select:
    """At most KEY_RANGES rows (lo, hi) covering the non-null values of `column` in `change`:
    the key span cut into equal slices, each slice's own min and max (empty slices give no row,
    so runs of keys far apart stay apart)."""

    def key(table: str = "") -> exp.Expr:
        return exp.column(exp.to_identifier(column, quoted=True), table=table or None)

    def number(table: str = "") -> exp.Expr:
        if is_date:
            return exp.Anonymous(this="unix_date", expressions=[key(table)])
        return exp.Cast(this=key(table), to=exp.DataType.build("double"))

    bounds = exp.select(exp.alias_(exp.Min(this=number()), "lo"), exp.alias_(exp.Max(this=number()), "hi")).from_(
        change.copy()
    )
    lo, hi = exp.column("lo", table="b"), exp.column("hi", table="b")
    span = exp.Paren(this=exp.Add(this=exp.Sub(this=hi, expression=lo.copy()), expression=exp.Literal.number(1)))
    offset = exp.Paren(this=exp.Sub(this=number("c"), expression=lo.copy()))
    slice_of = exp.Floor(
        this=exp.Div(this=exp.Mul(this=offset, expression=exp.Literal.number(KEY_RANGES)), expression=span)
    )
    return (
        exp.select(exp.alias_(exp.Min(this=key("c")), "lo"), exp.alias_(exp.Max(this=key("c")), "hi"))
        .from_(exp.alias_(change.copy(), "c", table=True))
        .join(exp.alias_(exp.Subquery(this=bounds), "b", table=True), join_type="cross")
        .where(exp.Not(this=exp.Is(this=key("c"), expression=exp.Null())))
        .group_by(slice_of)
    )


def union(keys: list):
    """The distinct values of several changes' key arrays, in the first one's type; None when one
    is unknown (too many keys) or does not convert to that type."""
    if any(k is None for k in keys):
        return None
    arrays = [k.combine_chunks() if isinstance(k, pa.ChunkedArray) else k for k in keys]
    try:
        return pc.unique(pa.chunked_array([a.cast(arrays[0].type) for a in arrays], type=arrays[0].type))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
