"""Delta source tables for the tests, written and changed with the `deltalake` package.

Every test source has the same columns, with small domains so that group and join keys collide:

    id  BIGINT          target of row-level updates/deletes (exact duplicate rows share it)
    k   INT  nullable   0..3      group / join key
    g   STRING nullable 'a'..'c'  second key
    v   INT  nullable   -5..5     value (MIN/MAX, filters, SUM)
    x   DOUBLE nullable           value (AVG, STDDEV, ...)
    d   DECIMAL(12,2) nullable    value (exact sums)
    dt  DATE nullable   around a year boundary (date functions)

Changes are expressed as `Op` objects that resolve their targets against the table's current
rows when applied, so a batch drawn by hypothesis is meaningful whatever the state.
"""

from __future__ import annotations

import datetime
import decimal
import os
from dataclasses import dataclass
from typing import Optional

import pyarrow as pa

COLUMNS = ("id", "k", "g", "v", "x", "d", "dt")
VALUE_COLUMNS = ("k", "g", "v", "x", "d", "dt")
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("k", pa.int32()),
        ("g", pa.string()),
        ("v", pa.int32()),
        ("x", pa.float64()),
        ("d", pa.decimal128(12, 2)),
        ("dt", pa.date32()),
    ]
)
CDF_ON = {"delta.enableChangeDataFeed": "true"}


def row(id, k=None, g=None, v=None, x=None, d=None, dt=None) -> dict:
    """A source row; d may be given as str/int/float, dt as 'YYYY-MM-DD'."""
    if d is not None and not isinstance(d, decimal.Decimal):
        d = decimal.Decimal(str(d)).quantize(decimal.Decimal("0.01"))
    if isinstance(dt, str):
        dt = datetime.date.fromisoformat(dt)
    return {"id": id, "k": k, "g": g, "v": v, "x": x, "d": d, "dt": dt}


def to_arrow(rows) -> pa.Table:
    return pa.Table.from_pylist([dict(r) for r in rows], schema=SCHEMA)


def create_source(path: str, rows, cdf: bool = True, schema: pa.Schema = SCHEMA) -> str:
    """Create (or overwrite) a Delta table at path with rows; change data feed on unless cdf=False."""
    from deltalake import write_deltalake

    os.makedirs(os.path.dirname(path), exist_ok=True)
    table = pa.Table.from_pylist([dict(r) for r in rows], schema=schema)
    write_deltalake(path, table, mode="overwrite", configuration=CDF_ON if cdf else None)
    return path


def append_files(path: str, tables: list) -> None:
    """Append each pyarrow table as a parquet file of its own, all in one Delta commit (a table of
    many files without a commit per file)."""
    import json
    import time
    import uuid

    import pyarrow.parquet as pq
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction, RemoveAction

    table = DeltaTable(path)
    actions: list[AddAction | RemoveAction] = []
    for data in tables:
        name = f"part-{uuid.uuid4().hex}.parquet"
        pq.write_table(data, os.path.join(path, name))
        stats = json.dumps({"numRecords": data.num_rows})
        size = os.path.getsize(os.path.join(path, name))
        actions.append(AddAction(name, size, {}, int(time.time() * 1000), True, stats))
    table.create_write_transaction(actions, mode="append", schema=tables[0].schema)


def read_rows(path: str) -> list:
    from deltalake import DeltaTable

    return DeltaTable(path).to_pyarrow_table().to_pylist()


def table_version(path: str) -> int:
    from deltalake import DeltaTable

    return DeltaTable(path).version()


# ---------------------------------------------------------------------------------------------
# SQL literals for delta-rs predicates and update expressions (DataFusion SQL)

_TYPES = {"id": "BIGINT", "k": "INT", "g": "STRING", "v": "INT", "x": "DOUBLE", "d": "DECIMAL(12,2)", "dt": "DATE"}


def literal(col: str, value) -> str:
    if value is None:
        return f"CAST(NULL AS {_TYPES[col]})"
    if col == "g":
        return "'" + str(value).replace("'", "''") + "'"
    if col == "dt":
        return f"CAST('{value.isoformat()}' AS DATE)"
    if col == "d":
        return f"CAST({value} AS DECIMAL(12,2))"
    if col == "x":
        return f"CAST({float(value)!r} AS DOUBLE)"
    return str(int(value))


def eq_predicate(col: str, value) -> str:
    """Null-safe equality in a delta-rs predicate."""
    if value is None:
        return f"{col} IS NULL"
    return f"{col} = {literal(col, value)}"


def _in_ids(ids) -> str:
    ids = sorted(set(ids))
    return f"id IN ({', '.join(str(i) for i in ids)})"


# ---------------------------------------------------------------------------------------------
# Changes


class Op:
    """One change to one source table; apply() makes (at most) one Delta commit."""

    table: str

    def apply(self, path: str) -> Optional[str]:
        """Apply to the table at path; return a description of what was done (None: no-op)."""
        raise NotImplementedError


def _pick(rows, pick: int):
    if not rows:
        return None
    ordered = sorted(rows, key=lambda r: (r["id"], repr(r)))
    return ordered[pick % len(ordered)]


@dataclass
class Insert(Op):
    table: str
    rows: list  # row dicts without ids or with id=None: fresh ids are assigned

    def apply(self, path):
        from deltalake import write_deltalake

        if not self.rows:
            return None
        existing = read_rows(path)
        next_id = max((r["id"] for r in existing), default=0) + 1
        rows = []
        for r in self.rows:
            r = dict(r)
            if r.get("id") is None:
                r["id"] = next_id
                next_id += 1
            rows.append(r)
        write_deltalake(path, to_arrow(rows), mode="append")
        return f"insert {len(rows)} rows into {self.table}"


@dataclass
class InsertDuplicates(Op):
    """Append exact copies (same id too) of existing rows."""

    table: str
    picks: list  # indexes into the current rows (modulo their count)

    def apply(self, path):
        from deltalake import write_deltalake

        rows = read_rows(path)
        if not rows or not self.picks:
            return None
        copies = [_pick(rows, p) for p in self.picks]
        write_deltalake(path, to_arrow(copies), mode="append")
        return f"append {len(copies)} exact duplicates into {self.table} (ids {[c['id'] for c in copies]})"


@dataclass
class UpdateRows(Op):
    """Set columns of the rows picked by position (all rows sharing the picked id)."""

    table: str
    picks: list
    updates: dict  # column -> new value (None: NULL)

    def apply(self, path):
        from deltalake import DeltaTable

        rows = read_rows(path)
        if not rows or not self.picks or not self.updates:
            return None
        ids = [_pick(rows, p)["id"] for p in self.picks]
        sets = {c: literal(c, v) for c, v in self.updates.items()}
        DeltaTable(path).update(updates=sets, predicate=_in_ids(ids))
        return f"update {self.table} set {self.updates} where {_in_ids(ids)}"


@dataclass
class UpdateWhere(Op):
    """Set columns of every row where `col <=> value` (e.g. move a whole group to another key)."""

    table: str
    col: str
    value: object
    updates: dict

    def apply(self, path):
        from deltalake import DeltaTable

        if not self.updates:
            return None
        sets = {c: literal(c, v) for c, v in self.updates.items()}
        DeltaTable(path).update(updates=sets, predicate=eq_predicate(self.col, self.value))
        return f"update {self.table} set {self.updates} where {eq_predicate(self.col, self.value)}"


@dataclass
class DeleteRows(Op):
    table: str
    picks: list

    def apply(self, path):
        from deltalake import DeltaTable

        rows = read_rows(path)
        if not rows or not self.picks:
            return None
        ids = [_pick(rows, p)["id"] for p in self.picks]
        DeltaTable(path).delete(_in_ids(ids))
        return f"delete from {self.table} where {_in_ids(ids)}"


@dataclass
class DeleteWhere(Op):
    """Delete every row where `col <=> value` (e.g. all rows of a group)."""

    table: str
    col: str
    value: object

    def apply(self, path):
        from deltalake import DeltaTable

        DeltaTable(path).delete(eq_predicate(self.col, self.value))
        return f"delete from {self.table} where {eq_predicate(self.col, self.value)}"


@dataclass
class DeleteAll(Op):
    table: str

    def apply(self, path):
        from deltalake import DeltaTable

        DeltaTable(path).delete()
        return f"delete all rows of {self.table}"


@dataclass
class DeleteExtreme(Op):
    """Delete the rows holding the MIN or MAX of `col` within the group `group_col <=> group`
    (group_col None: over the whole table)."""

    table: str
    col: str
    kind: str  # "min" | "max"
    group_col: Optional[str] = "k"
    group: object = None

    def apply(self, path):
        from deltalake import DeltaTable

        rows = read_rows(path)
        if self.group_col is not None:
            rows = [r for r in rows if r[self.group_col] == self.group]
        values = [r[self.col] for r in rows if r[self.col] is not None]
        if not values:
            return None
        target = max(values) if self.kind == "max" else min(values)
        pred = eq_predicate(self.col, target)
        if self.group_col is not None:
            pred += " AND " + eq_predicate(self.group_col, self.group)
        DeltaTable(path).delete(pred)
        return f"delete the {self.kind} of {self.col} from {self.table} where {pred}"


@dataclass
class UpdateExtreme(Op):
    """Lower a MAX (or raise a MIN) of `col` in a group: the extremum moves inward."""

    table: str
    col: str
    kind: str
    group_col: Optional[str] = "k"
    group: object = None
    new_value: object = None

    def apply(self, path):
        from deltalake import DeltaTable

        rows = read_rows(path)
        if self.group_col is not None:
            rows = [r for r in rows if r[self.group_col] == self.group]
        values = [r[self.col] for r in rows if r[self.col] is not None]
        if not values:
            return None
        target = max(values) if self.kind == "max" else min(values)
        pred = eq_predicate(self.col, target)
        if self.group_col is not None:
            pred += " AND " + eq_predicate(self.group_col, self.group)
        DeltaTable(path).update(updates={self.col: literal(self.col, self.new_value)}, predicate=pred)
        return f"update the {self.kind} of {self.col} in {self.table} to {self.new_value!r} where {pred}"


def apply_batch(paths: dict, ops) -> list:
    """Apply ops in order; paths maps a table name (Op.table) to its Delta path. Returns descriptions."""
    done = []
    for op in ops:
        what = op.apply(paths[op.table])
        if what:
            done.append(what)
    return done
