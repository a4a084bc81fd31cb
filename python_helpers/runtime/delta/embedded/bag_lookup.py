"""The MERGE rows of a bag stored as its rows come, resolved in the dbt process (embedded engine).

A bag without a row id is stored as its rows come (dvm/bag_result.py): a tuple may be several
stored rows whose counts add up. A change that takes from a tuple must know what is stored of
it: one row is updated or deleted, several are deleted beside an insert of what is left
(dvm/merge_actions.py). Where delta-rs applies the MERGE in the dbt process, the refresh's
query sends only the consolidated change (the tuple's columns and its weight `__dvm_w`), and
the stored rows of the losing tuples are looked up here, by a filtered scan of the stored
result's files at the version the refresh read: Arrow's scan of a few columns, which on two
cores took 0.3-0.5 s over the demo's 10-11 M stored rows where Spark's semi join with every
stored row, in the MERGE rows' query, took 1.5-2.5 s. A change that only adds rows reads no
stored file.

`actions` is pure (Arrow in, Arrow out); `merge_rows` adds the scan.
"""

from __future__ import annotations

from typing import Callable, Optional

import pyarrow as pa
import pyarrow.compute as pc

from python_helpers.dvm.merge_actions import ACTION, DELETE, INSERT, UPSERT
from python_helpers.dvm.stored_reads import COUNT
from python_helpers.dvm.tree import WEIGHT
from python_helpers.runtime.delta.base import StoredRowsMissing


def losing_filter(change: pa.Table, columns: list) -> Optional[pc.Expression]:
    """A filter on the stored rows that keeps every row of a tuple the change takes from (and
    some others: each column's values are matched on their own); None when nothing is lost or
    no column is given."""
    losing = change.filter(pc.less(change.column(WEIGHT), 0))
    if not losing.num_rows:
        return None
    condition: Optional[pc.Expression] = None
    for c, values in losing_values(losing, columns).items():
        # is_in keeps a NULL where the values hold one: a NULL meets a NULL, as in the MERGE.
        part = pc.field(c).isin(values)
        condition = part if condition is None else condition & part
    return condition


def losing_values(losing: pa.Table, columns: list) -> dict:
    """{column: its distinct values among the `losing` tuples}: a stored row can belong to a
    losing tuple only where each of its columns holds one of them."""
    return {c: pc.unique(losing.column(c)) for c in columns}


def stored_counts(stored: pa.Table, columns: list) -> dict:
    """{tuple: (its count, its stored rows)} of the stored rows given (columns + __dvm_count);
    NULLs group together, as the MERGE meets them (IS NOT DISTINCT FROM)."""
    if not stored.num_rows:
        return {}
    grouped = stored.group_by(columns).aggregate([(COUNT, "sum"), (COUNT, "count")])
    keys = zip(*[grouped.column(c).to_pylist() for c in columns])
    values = zip(grouped.column(f"{COUNT}_sum").to_pylist(), grouped.column(f"{COUNT}_count").to_pylist())
    return dict(zip(keys, values))


def actions(change: pa.Table, columns: list, stored: dict) -> pa.Table:
    """The MERGE rows (ACTION, `columns`, __dvm_count) for the consolidated `change` (`columns`
    and __dvm_w, one row per tuple) against `stored` (stored_counts of at least the losing
    tuples): the rows dvm/bag_result.py's SQL gives where Spark looks up the stored result.

    A tuple gaining rows: an INSERT of them. A losing one: its stored count plus the weight;
    gone at 0 (DELETE), one stored row updated (UPSERT), or several deleted beside an INSERT of
    what is left. A change that takes more of a tuple than is stored raises StoredRowsMissing:
    the stored result is not the old result the change was computed against."""
    weights = change.column(WEIGHT).to_pylist()
    tuples = list(zip(*[change.column(c).to_pylist() for c in columns])) if columns else [()] * change.num_rows
    rows_at: list = []
    acts: list = []
    counts: list = []

    def emit(row: int, action: str, count: int) -> None:
        rows_at.append(row)
        acts.append(action)
        counts.append(count)

    missing = []
    for i, (values, w) in enumerate(zip(tuples, weights)):
        if w > 0:
            emit(i, INSERT, w)
            continue
        count_now, stored_rows = stored.get(values, (0, 0))
        count = count_now + w
        if count < 0 or not stored_rows:
            missing.append(values)
        elif count == 0:
            emit(i, DELETE, count)
        elif stored_rows >= 2:
            emit(i, DELETE, count)
            emit(i, INSERT, count)
        else:
            emit(i, UPSERT, count)
    if missing:
        raise StoredRowsMissing(
            f"the change takes more rows of {len(missing):,} tuples than the stored result holds "
            f"(the first: {missing[0]!r})"
        )
    picked = change.select(columns).take(pa.array(rows_at, type=pa.int64()))
    out = [pa.array(acts, type=pa.string())] + [picked.column(c) for c in columns]
    out.append(pa.array(counts, type=pa.int64()))
    return pa.Table.from_arrays(out, names=[ACTION, *columns, COUNT])


def merge_rows(datasets: Callable[[], list], types: dict, change: pa.Table, columns: list) -> pa.Table:
    """The MERGE rows for `change` (as `actions`), the stored rows read from `datasets()` (the
    stored result's files at the version the refresh read: tables.parquet_datasets; opened only
    when the change takes rows) only where a losing tuple can be; `types`: the stored result's
    Arrow type of each column."""
    change = pa.table({**{c: change.column(c).cast(types[c]) for c in columns}, WEIGHT: change.column(WEIGHT)})
    condition = losing_filter(change, columns)
    if condition is None:
        return actions(change, columns, {})
    stored_schema = pa.schema([pa.field(c, types[c]) for c in columns] + [pa.field(COUNT, pa.int64())])
    found = [stored_schema.empty_table()]
    for dataset in datasets():
        if all(dataset.schema.field(c).type == types[c] for c in columns):
            found.append(dataset.to_table(columns=[*columns, COUNT], filter=condition).cast(stored_schema))
            continue
        # Files of delta-rs' MERGE hold strings as string_view, which Arrow neither filters nor
        # checks against statistics: read in batches, each cast to the stored types, then kept.
        for batch in dataset.to_batches(columns=[*columns, COUNT]):
            found.append(pa.Table.from_batches([batch]).cast(stored_schema).filter(condition))
    return actions(change, columns, stored_counts(pa.concat_tables(found), columns))
