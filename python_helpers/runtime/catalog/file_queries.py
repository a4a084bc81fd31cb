"""The queries of catalog views that read Parquet files (`engine: embedded`): a version of a
Delta table as a generation directory of hard links (`runtime/delta/embedded/generations.py`),
or file by file where no such directory can be made, and a FROM item over exactly some files."""

from __future__ import annotations

from sqlglot import exp

from python_helpers.runtime import paths


def directory_relation(path: str, escaped: bool = False) -> exp.Table:
    """`parquet.`path``: Spark reads every data file under the directory."""
    return exp.Table(
        this=exp.to_identifier(path if escaped else paths.glob_escaped(path), quoted=True),
        db=exp.to_identifier("parquet"),
    )


def _typed(value: exp.Expr, name: str, spark_type: str) -> exp.Expr:
    """`CAST(value AS type) AS name`: a view's column."""
    return exp.alias_(exp.Cast(this=value, to=exp.DataType.build(spark_type)), name, quoted=True)


def _column(name: str) -> exp.Expr:
    return exp.column(exp.to_identifier(name, quoted=True))


def empty_query(spark_types: dict) -> exp.Select:
    """No rows, with the columns and types of `spark_types` (a version without files)."""
    return exp.select(*[_typed(exp.Null(), n, t) for n, t in spark_types.items()]).where(exp.false())


def files_relation(root: str, files: list, spark_types: dict) -> exp.Expression:
    """A FROM item reading exactly `files` under `root` (an empty typed relation when none)."""
    if not files:
        empty = empty_query(spark_types)
        return exp.Subquery(this=empty, alias=exp.TableAlias(this=exp.to_identifier("__dvm_empty")))
    rel = [paths.glob_escaped(paths.relative(f, root)).replace(",", "\\,") for f in files]
    base = paths.glob_escaped(root)
    path = f"{base}/{rel[0]}" if len(rel) == 1 else f"{base}/{{{','.join(rel)}}}"
    return directory_relation(path, escaped=True)


def generation_query(gen: str, spark_types: dict, partition_columns: list) -> exp.Expr:
    """The table's rows from a generation directory (generations.link_generation)."""
    from python_helpers.runtime.delta.embedded.generations import PARTITION_DIR

    def cast(table: str, name: str) -> exp.Expr:
        return _typed(exp.column(exp.to_identifier(name, quoted=True), table=table), name, spark_types[name])

    if not partition_columns:
        return exp.select(*[cast("d", n) for n in spark_types]).from_(
            exp.alias_(directory_relation(gen), "d", table=True)
        )
    data = exp.alias_(directory_relation(paths.join(gen, "data")), "d", table=True)
    parts = exp.alias_(directory_relation(paths.join(gen, "parts")), "m", table=True)
    on = exp.EQ(
        this=exp.column(exp.to_identifier(PARTITION_DIR, quoted=True), table="d"),
        expression=exp.column(exp.to_identifier(PARTITION_DIR, quoted=True), table="m"),
    )
    cols = [cast("m" if n in partition_columns else "d", n) for n in spark_types]
    return exp.select(*cols).from_(data).join(parts, on=on)


def files_query(root: str, files: list, spark_types: dict, partition_columns: list, partitions: list) -> exp.Expression:
    """The rows of a version named file by file (where no generation directory can be made):
    one branch per partition value, the values as literals."""
    if not partition_columns:
        cols = [_typed(_column(n), n, t) for n, t in spark_types.items()]
        return exp.select(*cols).from_(files_relation(root, files, spark_types))
    groups: dict = {}
    for f, values in zip(files, partitions):
        groups.setdefault(values, []).append(f)
    branches = []
    for values, group in sorted(groups.items(), key=lambda kv: repr(kv[0])):
        value_of = dict(values)
        cols = []
        for n, t in spark_types.items():
            if n in partition_columns:
                v = value_of.get(n)
                cols.append(_typed(exp.Null() if v is None else exp.Literal.string(v), n, t))
            else:
                cols.append(_typed(_column(n), n, t))
        data_types = {n: t for n, t in spark_types.items() if n not in partition_columns}
        branches.append(exp.select(*cols).from_(files_relation(root, group, data_types)))
    out: exp.Expression = branches[0]
    for b in branches[1:]:
        out = exp.Union(this=out, expression=b, distinct=False)
    return out
