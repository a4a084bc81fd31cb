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


_ARROW = {
    "BOOLEAN": pa.bool_(),
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INT": pa.int32(),
    "BIGINT": pa.int64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "TEXT": pa.string(),
    "VARCHAR": pa.string(),
    "CHAR": pa.string(),
    "BINARY": pa.binary(),
    "DATE": pa.date32(),
    "TIMESTAMPTZ": pa.timestamp("us", tz="UTC"),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    "TIMESTAMPNTZ": pa.timestamp("us"),
    "NULL": pa.null(),
}


def arrow_type(spark_type: str) -> pa.DataType:
    """The Arrow type of a Spark type name (`decimal(12,2)`, `array<struct<a:int>>`, ...), without
    a Spark session: what a query's analysis says, over any connection."""
    from sqlglot import exp

    if spark_type.strip().lower() == "void":
        return pa.null()
    return _arrow_of(exp.DataType.build(spark_type, dialect="spark"))


def _arrow_of(data_type) -> pa.DataType:
    from sqlglot import exp

    kind = data_type.this.name if hasattr(data_type.this, "name") else str(data_type.this)
    args = data_type.expressions
    if kind == "DECIMAL":
        precision, scale = (int(a.sql()) for a in args) if args else (10, 0)
        return pa.decimal128(precision, scale)
    if kind == "ARRAY":
        return pa.list_(_arrow_of(args[0]))
    if kind == "MAP":
        return pa.map_(_arrow_of(args[0]), _arrow_of(args[1]))
    if kind == "STRUCT":
        fields = []
        for column in args:
            assert isinstance(column, exp.ColumnDef), column
            fields.append(pa.field(column.name, _arrow_of(column.args["kind"])))
        return pa.struct(fields)
    if kind in _ARROW:
        return _ARROW[kind]
    raise ValueError(f"no Arrow type for Spark's {data_type.sql('spark')}")
