"""Make Delta tables readable by `schema.table` in Spark SQL without Delta Lake jars.

A persistent view over the parquet files live in the pinned version (DESIGN.md section 6): it
reads at native parquet speed and is found by later sessions sharing the metastore. It is
re-created after every commit, so it always names the current files.
"""
from __future__ import annotations

import os
import threading

import sqlglot
from sqlglot import exp

_DDL_LOCK = threading.Lock()  # dbt threads share one session; keep catalog DDL one at a time


def files_relation(root: str, files: list, spark_types: dict) -> exp.Expression:
    """A FROM item reading exactly `files` under `root` (an empty typed relation when none)."""
    if not files:
        cols = [exp.alias_(exp.Cast(this=exp.Null(), to=exp.DataType.build(t)), n, quoted=True)
                for n, t in spark_types.items()]
        empty = exp.select(*cols).where(exp.false())
        return exp.Subquery(this=empty, alias=exp.TableAlias(this=exp.to_identifier("__dvm_empty")))
    rel = [os.path.relpath(f, root) for f in files]
    path = f"{root}/{rel[0]}" if len(rel) == 1 else f"{root}/{{{','.join(rel)}}}"
    return exp.Table(this=exp.to_identifier(path, quoted=True), db=exp.to_identifier("parquet"))


def create_schema(spark, schema: str) -> None:
    with _DDL_LOCK:
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS `{schema}`")


# View texts this process created, per (session, view): several models reading one source at
# one version publish the same text, and re-creating it under a concurrent reader is a race.
_PUBLISHED: dict = {}


def replace_view(spark, schema: str, name: str, query: exp.Expression, force: bool = False) -> None:
    """CREATE OR REPLACE VIEW schema.name (a plain table of that name is replaced too);
    nothing is done when this process already published exactly this text, unless `force`
    (the view's captured schema must be renewed)."""
    from python_helpers.dvm.sqlgen import render

    text = render(query)
    key = (id(spark), schema.lower(), name.lower())
    with _DDL_LOCK:
        known = _PUBLISHED.get(key)
        if known == text and not force:
            return
        if known is not None:
            # This process made the view: swap the text without asking the catalog first
            # (each catalog lookup costs tens of ms); if it is gone after all, take the long way.
            try:
                spark.sql(f"ALTER VIEW `{schema}`.`{name}` AS {text}")
                _PUBLISHED[key] = text
                return
            except Exception:  # noqa: BLE001 - dropped by someone else: re-create below
                _PUBLISHED.pop(key, None)
        existing = _table_type(spark, schema, name)
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS `{schema}`")
        if existing == "VIEW":
            # ALTER VIEW swaps the text in place; CREATE OR REPLACE drops and re-creates, and a
            # reader on another dbt thread can miss the view in between.
            spark.sql(f"ALTER VIEW `{schema}`.`{name}` AS {text}")
        else:
            if existing is not None:
                spark.sql(f"DROP TABLE IF EXISTS `{schema}`.`{name}`")
            spark.sql(f"CREATE VIEW `{schema}`.`{name}` AS {text}")
        _PUBLISHED[key] = text


def forget(spark) -> None:
    """Drop what this process believes it published in `spark` (a view was found missing)."""
    with _DDL_LOCK:
        for key in [k for k in _PUBLISHED if k[0] == id(spark)]:
            del _PUBLISHED[key]
        for key in [k for k in _SOURCE_VERSIONS if k[0] == id(spark)]:
            del _SOURCE_VERSIONS[key]


# (session, relation) -> (path, table id, version) of the source view this process published.
_SOURCE_VERSIONS: dict = {}


def publish_source(spark, relation: str, stamp: tuple, make_query) -> None:
    """The view `schema.table` over a source at its pinned version; skipped (no catalog call)
    when this process already published the same `stamp` (path, table id, version)."""
    key = (id(spark), relation)
    if _SOURCE_VERSIONS.get(key) == stamp:
        return
    parts = relation.split(".")
    replace_view(spark, parts[-2], parts[-1], make_query())
    _SOURCE_VERSIONS[key] = stamp


def view_text(spark, schema: str, name: str):
    try:
        rows = spark.sql(f"SHOW CREATE TABLE `{schema}`.`{name}`").collect()
    except Exception:  # noqa: BLE001 - missing object: no text
        return None
    return rows[0][0] if rows else None


def _table_type(spark, schema: str, name: str):
    try:
        if not spark.catalog.tableExists(f"{schema}.{name}"):
            return None
        return spark.catalog.getTable(f"{schema}.{name}").tableType
    except Exception:  # noqa: BLE001
        return None


def source_view_query(root: str, files: list, spark_types: dict, partition_columns=()) -> exp.Expression:
    """The table's rows as of the pinned version.

    Files are grouped by partition directory (hive-style values become literals) and by the
    columns their parquet footer holds: files written before a column was added lack it, and a
    plain parquet scan would take one file's schema for all. Missing columns read as NULL.
    """
    if not files:
        cols = [exp.column(n, quoted=True) for n in spark_types]
        return exp.select(*cols).from_(files_relation(root, files, spark_types))
    data_names = [n for n in spark_types if n not in partition_columns]
    groups: dict = {}
    for f in files:
        directory = os.path.dirname(os.path.relpath(f, root)) if partition_columns else ""
        footer = _footer_columns(f)
        present = frozenset(n for n in data_names if footer is None or n.lower() in footer)
        groups.setdefault((directory, present), []).append(f)
    branches = []
    for (directory, present), group in sorted(groups.items(), key=lambda kv: (kv[0][0], sorted(kv[0][1]))):
        values = dict(_partition_value(part) for part in directory.split(os.sep) if "=" in part)
        cols = []
        for n, t in spark_types.items():
            if n in partition_columns:
                value = values.get(n)
                lit = exp.Null() if value is None else exp.Literal.string(value)
                cols.append(exp.alias_(exp.Cast(this=lit, to=exp.DataType.build(t)), n, quoted=True))
            elif n in present:
                cols.append(exp.column(n, quoted=True))
            else:
                cols.append(exp.alias_(exp.Cast(this=exp.Null(), to=exp.DataType.build(t)), n, quoted=True))
        read = {n: t for n, t in spark_types.items() if n in present}
        branches.append(exp.select(*cols).from_(files_relation(root, group, read)))
    out = branches[0]
    for b in branches[1:]:
        out = exp.Union(this=out, expression=b, distinct=False)
    return out


_FOOTERS: dict = {}  # data file -> lower-case column names; Delta data files never change


def _footer_columns(path: str):
    """Column names in a data file's footer; None when it cannot be read here (then the
    current schema is assumed)."""
    if path not in _FOOTERS:
        import pyarrow.parquet as pq

        try:
            _FOOTERS[path] = frozenset(n.lower() for n in pq.read_schema(path).names)
        except (OSError, ValueError):
            _FOOTERS[path] = None
    return _FOOTERS[path]


def _partition_value(part: str):
    from urllib.parse import unquote

    key, _, value = part.partition("=")
    value = unquote(value)
    return key, (None if value == "__HIVE_DEFAULT_PARTITION__" else value)


def parse_from_item(text: str) -> exp.Expression:
    return sqlglot.parse_one(f"SELECT * FROM {text}", read="spark").find(exp.From).this
