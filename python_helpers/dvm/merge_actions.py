"""What a merge row asks of the stored result: its action (the `ACTION` column of the MERGE rows
a stored-result layout builds), named here once for the layouts that choose it and the apply
paths that carry it out.

- UPSERT: the row replaces the stored row it meets by the match columns, or is inserted when it
  meets none.
- DELETE: the stored rows it meets are deleted.
- INSERT: the row is inserted and meets no stored row, even one of the same values. Only a bag
  stored as its rows come (bag_result.py) asks for it: another row of a tuple, or what is left
  of a tuple whose several stored rows a DELETE beside it removes.

The apply paths: delta-rs' MERGE (runtime/delta/embedded/storage.py), the executors' rewrite of
the touched files (embedded/executor_merge.py), and the spark engine's Delta MERGE and REPLACE
WHERE (runtime/delta/spark/sql.py). The spark engine handles UPSERT and DELETE only: it keeps a
row id in every bag (DeltaEngine.keeps_row_ids), so its bags are grouped and never ask for an
INSERT (BagResult.grouped).
"""

from __future__ import annotations

from sqlglot import exp

ACTION = "__dvm_action"
UPSERT = "U"
DELETE = "D"
INSERT = "I"


def literal(action: str) -> exp.Literal:
    return exp.Literal.string(action)


def is_(action: str, column: exp.Expr) -> exp.EQ:
    """`column` holds `action`."""
    return exp.EQ(this=column, expression=literal(action))


def array(*actions: str) -> exp.Array:
    """Several actions of one merge row (a bag's tuple: a DELETE beside an INSERT)."""
    return exp.Array(expressions=[literal(a) for a in actions])
