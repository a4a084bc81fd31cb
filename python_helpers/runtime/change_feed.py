"""A source's change data feed between two versions, as weighted rows for Spark.

The change is counted before it is read (the Delta log's statistics: `delta_log.py`), so the
decision to refresh in full is taken without reading a large change at all. Then:

* a small change (the usual case) is read in the driver with pyarrow, consolidated there (rows
  whose weights cancel disappear, so a source whose changes all cancel counts as unchanged) and
  handed to Spark as a local relation: no Spark job spent on it;
* a larger one is read by Spark itself from the change files (never through the driver) and
  consolidated in the delta SQL.

Weights: inserts and update post-images +1, deletes and pre-images -1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

import pyarrow as pa
import pyarrow.compute as pc

from python_helpers.dvm.tree import WEIGHT
from python_helpers.runtime import delta_log, paths
from python_helpers.runtime.delta_tables import consolidate_arrow, normalize_schema, spark_schema

CHANGE_TYPE = "_change_type"
WEIGHT_OF_CHANGE = {"insert": 1, "delete": -1, "update_preimage": -1, "update_postimage": 1}
# Up to this many change rows (counted or estimated from the log) a source's change is read in
# the driver; above, Spark reads the change files.
DRIVER_READ_MAX_ROWS = 50_000


@dataclass
class Changes:
    frame: Any  # a Spark DataFrame (pyspark is imported lazily): the read columns + the weight
    rows: int  # exact when `consolidated`, else the log's estimate
    consolidated: bool  # rows with equal values were summed and cancelled ones dropped
    arrow: Optional[pa.Table] = None  # the rows, when they were read in the driver


def table_stats(table) -> tuple[Optional[int], float]:
    """(rows of the snapshot from the log's statistics or None, bytes per row)."""
    from python_helpers.runtime.delta_tables import add_actions

    actions = add_actions(table)
    size = int(pc.sum(actions.column("size_bytes")).as_py() or 0) if "size_bytes" in actions.column_names else 0
    if "num_records" not in actions.column_names or actions.column("num_records").null_count:
        return None, 100.0
    rows = int(pc.sum(actions.column("num_records")).as_py() or 0)
    return rows, (size / rows if rows else 100.0)


def exact_rows(files: list) -> Optional[int]:
    """Rows of the change files: the log's counts, parquet footers for the rest (local files);
    None when a remote file has no count in the log."""
    import pyarrow.parquet as pq

    total = 0
    for f in files:
        if f.records is not None:
            total += f.records
        elif paths.is_uri(f.path):
            return None
        else:
            total += pq.ParquetFile(f.path).metadata.num_rows
    return total


def missing_files(files: list) -> list:
    """Change files that can no longer be read (vacuumed); only local files are checked."""
    return [f.path for f in files if not paths.is_uri(f.path) and not os.path.exists(f.path)]


def read_changes(
    spark, arrow_schema: pa.Schema, partition_columns: list, table_path: str, files: list, columns: list, rows: int
) -> Changes:
    """The change rows of `files` restricted to `columns`, with weights."""
    if rows <= DRIVER_READ_MAX_ROWS:
        data = _read_in_driver(arrow_schema, files, columns)
        merged = consolidate_arrow(data)
        if merged is not None:
            data = merged
        frame = (
            spark.createDataFrame(data, schema=spark_schema(data.schema))
            if data.num_rows
            else spark.createDataFrame([], spark_schema(data.schema))
        )
        return Changes(frame, data.num_rows, merged is not None, data)
    return Changes(_read_in_spark(spark, arrow_schema, partition_columns, table_path, files, columns), rows, False)


def _target_schema(arrow_schema: pa.Schema, columns: list) -> pa.Schema:
    return pa.schema([arrow_schema.field(c) for c in columns] + [pa.field(WEIGHT, pa.int64(), False)])


def _read_in_driver(arrow_schema: pa.Schema, files: list, columns: list) -> pa.Table:
    import pyarrow.parquet as pq

    target = _target_schema(arrow_schema, columns)
    parts = []
    for f in files:
        wanted = list(columns) + ([CHANGE_TYPE] if f.kind == "cdc" else [])
        if paths.is_uri(f.path):
            import pyarrow.fs as pafs

            fs, inner = pafs.FileSystem.from_uri(paths.for_delta_rs(f.path))
            handle = pq.ParquetFile(fs.open_input_file(inner))
        else:
            handle = pq.ParquetFile(f.path)
        present = set(handle.schema_arrow.names)
        data = handle.read(columns=[c for c in wanted if c in present])
        data = data.cast(normalize_schema(data.schema))
        n = data.num_rows
        partition = dict(f.partition_values)
        arrays = []
        for c in columns:
            type_ = arrow_schema.field(c).type
            if c in present:
                arrays.append(data.column(c).cast(type_))
            elif c in partition:
                arrays.append(delta_log.typed_partition_value(partition[c], type_, n))
            else:
                arrays.append(pa.nulls(n, type_))
        if f.kind == "cdc":
            kinds = data.column(CHANGE_TYPE).to_pylist()
            weights = pa.array([WEIGHT_OF_CHANGE.get(k, 0) for k in kinds], pa.int64())
        else:
            weights = pa.array([1 if f.kind == "add" else -1] * n, pa.int64())
        arrays.append(weights)
        parts.append(pa.Table.from_arrays(arrays, schema=target))
    if not parts:
        return target.empty_table()
    data = pa.concat_tables(parts)
    return data.filter(pc.not_equal(data.column(WEIGHT), 0))


def _hive_layout(table_root: str, files: list, partition_columns: list) -> bool:
    """Every file sits in the `col=value/...` directories of its partition values (so Spark's
    partition discovery from a base path gives the same values)."""
    from urllib.parse import unquote

    for f in files:
        rel = paths.relative(f.path, table_root).split("/")[:-1]
        if rel and rel[0] == "_change_data":
            rel = rel[1:]
        parsed = dict(part.split("=", 1) for part in rel if "=" in part)
        values = dict(f.partition_values)
        for c in partition_columns:
            raw = parsed.get(c)
            if raw is None:
                return False
            value = None if raw == "__HIVE_DEFAULT_PARTITION__" else unquote(raw)
            if value != values.get(c):
                return False
    return True


def _read_in_spark(
    spark, arrow_schema: pa.Schema, partition_columns: list, table_root: str, files: list, columns: list
):
    """Spark reads the change files itself (nothing passes through the driver)."""
    from pyspark.sql import functions as F

    frames = []
    full = spark_schema(arrow_schema)
    hive = not partition_columns or _hive_layout(table_root, files, partition_columns)
    for kind in ("cdc", "add", "remove"):
        group = [f for f in files if f.kind == kind]
        if not group:
            continue
        if hive:
            batches = [(None, group)]
        else:  # partition values as literals, one read per partition
            by_value: dict = {}
            for f in group:
                by_value.setdefault(f.partition_values, []).append(f)
            batches = list(by_value.items())
        for values, batch in batches:
            fields = [fl for fl in full.fields if hive or fl.name not in partition_columns]
            schema = type(full)(fields)
            if kind == "cdc":
                from pyspark.sql.types import StringType, StructField

                schema = schema.add(StructField(CHANGE_TYPE, StringType()))
            reader = spark.read.schema(schema)
            if hive and partition_columns:
                base = table_root if kind != "cdc" else paths.join(table_root, "_change_data")
                reader = reader.option("basePath", paths.for_spark(base, table_root))
            frame = reader.parquet(*[paths.spark_glob_path(f.path, table_root) for f in batch])
            if values is not None:
                for c, v in dict(values).items():
                    typed = full[c].dataType
                    frame = frame.withColumn(c, F.lit(v).cast(typed))
            if kind == "cdc":
                w = (
                    F.when(F.col(CHANGE_TYPE).isin("insert", "update_postimage"), F.lit(1))
                    .when(F.col(CHANGE_TYPE).isin("delete", "update_preimage"), F.lit(-1))
                    .otherwise(F.lit(0))
                )
            else:
                w = F.lit(1 if kind == "add" else -1)
            frames.append(
                frame.select(*[F.col(f"`{c.replace('`', '``')}`") for c in columns], w.cast("bigint").alias(WEIGHT))
            )
    if not frames:
        return spark.createDataFrame([], spark_schema(_target_schema(arrow_schema, columns)))
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out.where(F.col(WEIGHT) != 0)
