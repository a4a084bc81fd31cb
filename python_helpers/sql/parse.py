"""Parse a model's compiled SQL (Spark dialect) and qualify it against the source schemas."""

from __future__ import annotations

import hashlib

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from python_helpers.errors import SqlParseError, UnsupportedSql

DIALECT = "spark"


def parse_query(model: str, sql: str) -> exp.Query:
    """One SELECT (or set operation / WITH query); anything else is rejected with the model named."""
    try:
        statements = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except ParseError as err:
        first = err.errors[0] if err.errors else {}
        where = f" at line {first.get('line')}, column {first.get('col')}" if first else ""
        raise SqlParseError(
            model,
            f"the model's SQL does not parse as Spark SQL{where}: {first.get('description', err)}",
            "fix the SQL in the model file",
        ) from None
    if len(statements) != 1:
        raise SqlParseError(
            model,
            f"the model must hold exactly one SELECT statement, found {len(statements)}",
            "remove the extra statements",
        )
    query = statements[0]
    if not isinstance(query, exp.Query):
        raise SqlParseError(
            model,
            f"the model's SQL is a {query.key.upper()} statement, not a SELECT",
            "a stream table is defined by a SELECT query",
        )
    return query


def source_relations(query: exp.Expr) -> list[str]:
    """The `schema.table` names the query reads (lower case, CTE names excluded, first-seen order)."""
    cte_names = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}
    seen: list[str] = []
    for table in query.find_all(exp.Table):
        if not table.name:
            continue  # table-valued function or similar; the tree builder reports it
        if not table.db and table.name.lower() in cte_names:
            continue
        name = relation_name(table)
        if name not in seen:
            seen.append(name)
    return seen


def relation_name(table: exp.Table) -> str:
    parts = [p for p in (table.catalog, table.db, table.name) if p]
    return ".".join(parts).lower()


def qualify_query(model: str, query: exp.Query, schemas: dict[str, dict[str, str]]) -> exp.Query:
    """Qualify every column with its table alias and expand `*`, given {"schema.table": {col: type}}."""
    nested: dict = {}
    for relation, columns in schemas.items():
        parts = relation.split(".")
        if len(parts) == 1:
            nested[parts[0]] = columns
        elif len(parts) == 2:
            nested.setdefault(parts[0], {})[parts[1]] = columns
        else:
            nested.setdefault(parts[0], {}).setdefault(parts[1], {})[parts[2]] = columns
    try:
        qualified = qualify(
            query.copy(),
            schema=nested,
            dialect=DIALECT,
            quote_identifiers=False,
            validate_qualify_columns=True,
            identify=False,
        )
    except (OptimizeError, ParseError) as err:
        raise UnsupportedSql(model, f"column resolution failed ({err})") from None
    return _with_column_types(qualified, nested)


def _with_column_types(query: exp.Query, nested: dict) -> exp.Query:
    """The source columns' types on the column nodes (`Column.type`), for rewrites that are
    exact only when compared values share a type. Best effort: a query sqlglot cannot type is
    returned untyped (`type` None), and those rewrites then leave it as it is."""
    try:
        return annotate_types(query, schema=nested, dialect=DIALECT)  # in place: `query` is qualify's own copy
    except Exception:  # noqa: BLE001 - typing is an optimisation's precondition, never a failure
        return query


def fingerprint(sql: str, shaping_config: dict | None = None, format_version: int = 1) -> str:
    """Identity of the stored result's definition: the normalised SQL plus result-shaping config."""
    try:
        normal = sqlglot.parse_one(sql, read=DIALECT).sql(DIALECT, normalize=True, pretty=False)
    except ParseError:
        normal = " ".join(sql.split())
    payload = repr((format_version, normal, sorted((shaping_config or {}).items())))
    return hashlib.sha256(payload.encode()).hexdigest()
