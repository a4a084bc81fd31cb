"""dbt's enforced model contracts: the query's output columns against the declared ones.

Checked when the stored result is built in full (the first build, a changed model SQL, a changed
contract: the contract is part of the stored result's fingerprint), before anything is written.
"""

from __future__ import annotations

from python_helpers.errors import StreamTableError

# Spellings of one Spark type that a contract may use.
_ALIASES = {
    "integer": "int",
    "long": "bigint",
    "short": "smallint",
    "byte": "tinyint",
    "real": "float",
    "dec": "decimal",
    "numeric": "decimal",
    "text": "string",
    "bool": "boolean",
}


def normal_type(data_type: str) -> str:
    """A type as Spark's simpleString writes it (`integer` -> `int`, `DECIMAL(10, 2)` -> `decimal(10,2)`)."""
    text = "".join(str(data_type).lower().split())
    head, _, rest = text.partition("(")
    head = _ALIASES.get(head, head)
    if head == "decimal" and not rest:
        return "decimal(10,0)"
    return head + ("(" + rest if rest else "")


class ContractMismatch(StreamTableError):
    """The query's columns differ from the enforced contract; `yaml_columns` and `sql_columns`
    are dbt's shape ({"name", "data_type"}) for its contract error."""

    def __init__(self, model: str, yaml_columns: list, sql_columns: list, problem: str):
        super().__init__(
            model,
            problem,
            "make the model's SQL and the columns in its YAML (name, data_type, order does not matter) agree",
        )
        self.yaml_columns = yaml_columns
        self.sql_columns = sql_columns


def check(model: str, declared: list, columns: list) -> None:
    """Raise ContractMismatch unless `columns` (the query's output, conn.OutputColumn) are
    exactly the `declared` [(name, data_type)] columns."""
    yaml_columns = [{"name": str(n), "data_type": normal_type(t)} for n, t in declared]
    sql_columns = [{"name": c.name, "data_type": c.type} for c in columns]
    by_name = {c["name"].lower(): c for c in sql_columns}
    problems = []
    for col in yaml_columns:
        actual = by_name.get(col["name"].lower())
        if actual is None:
            problems.append(f"{col['name']}: missing in definition (contract {col['data_type']})")
        elif actual["data_type"] != col["data_type"]:
            problems.append(
                f"{col['name']}: data type mismatch (definition {actual['data_type']}, contract {col['data_type']})"
            )
        else:
            actual["name"] = col["name"]  # dbt matches names exactly; Spark's are case-insensitive
    declared_names = {c["name"].lower() for c in yaml_columns}
    problems += [
        f"{c['name']}: missing in contract (definition {c['data_type']})"
        for c in sql_columns
        if c["name"].lower() not in declared_names
    ]
    if problems:
        raise ContractMismatch(
            model,
            yaml_columns,
            sql_columns,
            "the enforced contract does not match the query's columns: "
            + "; ".join(problems)
            + "; nothing was written",
        )
