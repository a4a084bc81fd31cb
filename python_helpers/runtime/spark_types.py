"""Arrow and Spark types: Arrow types Spark's converter takes (what delta-rs and pyarrow hand
over), Spark's schema and type names of an Arrow schema. Shared by the connections and both
Delta engines."""

from __future__ import annotations

import pyarrow as pa


def normalize_type(t: pa.DataType) -> pa.DataType:
    """Arrow types Spark's converter does not take (views, large, unsigned) to ones it does."""
    if pa.types.is_string_view(t) or pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_unsigned_integer(t):
        return pa.int64()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=t.tz)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return pa.list_(normalize_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, normalize_type(f.type), f.nullable) for f in t])
    if pa.types.is_map(t):
        return pa.map_(normalize_type(t.key_type), normalize_type(t.item_type))
    return t


def normalize_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, normalize_type(f.type), f.nullable) for f in schema])


def spark_schema(arrow_schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema)


def spark_type_strings(arrow_schema: pa.Schema) -> dict:
    return {f.name: f.dataType.simpleString() for f in spark_schema(arrow_schema).fields}
