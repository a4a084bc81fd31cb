"""How a refresh's MERGE rows read the stored result and the delta (shared by the stored-result
layouts of stored_result.py and keyed_result.py), and the stored result's bookkeeping columns."""

from __future__ import annotations

from sqlglot import exp

from python_helpers.dvm.sqlgen import Context, alias, col, select_from, sub

ROW_ID = "__dvm_row_id"
ACTION = "__dvm_action"
COUNT = "__dvm_count"
HAVING = "__dvm_having"


def touched_storage(ctx: Context, storage: exp.Expr, delta_rows: exp.Expr, delta_row_id) -> exp.Expr:
    """The stored rows a MERGE can match. With a small delta (the engine counted few change rows)
    and a large stored result (ctx.restrict_storage): those whose row id is among the delta's,
    by a semi join that broadcasts the delta's row ids. The stored result is then scanned once,
    without the shuffle and sort that joining all of it costs (a 1.6 M-row result for 40 changed
    rows), and the LEFT JOIN after it moves only the rows found. The delta is then named twice:
    pass it through `delta_once`."""
    if not (ctx.small_delta and ctx.restrict_storage):
        return storage
    st, dk, k = ctx.alias("st"), ctx.alias("dk"), ctx.alias("k")
    ids = select_from([alias(delta_row_id(dk), "__dvm_rid")], sub(delta_rows.copy(), dk))
    step = select_from([exp.Star()], sub(storage.copy(), st))
    step.set("hint", exp.Hint(expressions=[exp.Anonymous(this="BROADCAST", expressions=[exp.to_identifier(k)])]))
    return step.join(
        sub(ids, k), on=exp.EQ(this=col(ROW_ID, st), expression=col("__dvm_rid", k)), join_type="LEFT SEMI", copy=False
    )


def delta_once(ctx: Context, rows: exp.Expr) -> exp.Expr:
    """The delta's rows computed once, now, where the MERGE rows' query names them twice (the rows
    themselves and, in touched_storage, the stored row ids they reach). Spark reuses neither the
    delta's consolidation nor its scans across the two: a 6 M-row fact's refresh scanned its
    lineitem and orders snapshots twice for 1,000 changed rows."""
    if ctx.small_delta and ctx.restrict_storage and ctx.materialize is not None:
        return ctx.materialize(rows)
    return rows
