"""The bag layout: the result of a tree without an aggregate at its root and without a declared
key (stored_result.py's module text): tuples with their multiplicities, as the rows come or one
stored row per tuple (BagResult.grouped). Chosen by stored_result.plan_stored_result."""

from __future__ import annotations

import re
from typing import Optional

from sqlglot import exp

from python_helpers.dvm.differentiate import delta, plain
from python_helpers.dvm.merge_actions import ACTION, DELETE, INSERT, UPSERT, array, literal
from python_helpers.dvm.sqlgen import (
    Context,
    alias,
    col,
    consolidate,
    explode_into,
    repeat_rows,
    row_id,
    select_from,
    sub,
)
from python_helpers.dvm.stored_reads import COUNT, ROW_ID, delta_once, matches, touched_storage
from python_helpers.dvm.stored_result import KEY_TYPE, MaintainedResult, _cast
from python_helpers.dvm.tree import WEIGHT, Node

# The Spark types whose equality is the same in Spark (GROUP BY, `<=>`) and in delta-rs' MERGE
# (`IS NOT DISTINCT FROM`): a bag of only these is met by its own columns. Not floating point
# (NaN, -0.0), nested types, CHAR/VARCHAR (padding) or binary (not tried).
MATCHABLE_TYPES = frozenset(
    {"tinyint", "smallint", "int", "bigint", "string", "date", "timestamp", "timestamp_ntz", "boolean"}
)
_DECIMAL = re.compile(r"decimal\(\d+,\s*\d+\)")


def matchable(spark_type: Optional[str]) -> bool:
    return spark_type is not None and (spark_type in MATCHABLE_TYPES or bool(_DECIMAL.fullmatch(spark_type)))


class BagResult(MaintainedResult):
    """Tuples with their multiplicities `__dvm_count`, met by the tuple's own columns (NULL meets
    NULL, as GROUP BY puts NULLs together) where every column is of MATCHABLE_TYPES, else by
    `__dvm_row_id` (the md5 of its JSON form): that digest is computed per stored row and cost a
    bag's full build as much again as its GROUP BY (11 M rows of the demo's customer_events:
    17.9 s against 9.1 s). `row_ids` (DeltaEngine.keeps_row_ids): the engine lists changed rows
    by one column, so a row id is always stored.

    A bag met by its columns is stored as its rows come (`grouped` False): a full build writes
    each row with a count of 1, as a `table` model writes it, without the GROUP BY over every
    column that cost the demo's 11 M-row bag 9.1 s against the table's 2.2 s. A tuple may then
    be stored as several rows whose counts add up. A refresh inserts a row for each tuple the
    change adds to ('I', whatever is stored: a change that only adds rows is an append) and
    looks up only the tuples it takes from: one stored row is updated or deleted, several are
    deleted ('D') beside an insert of what is left. A DISTINCT result, or one met by a row id,
    is grouped: one stored row per tuple."""

    def __init__(self, model, output_names, user_columns, input_node: Node, distinct: bool, row_ids: bool = False):
        super().__init__(model, output_names, user_columns)
        self.input = input_node
        self.distinct = distinct
        self.kind = "distinct" if distinct else "bag"
        self.row_ids = row_ids

    @property
    def stores_row_id(self) -> bool:
        columns = self.input.columns
        return self.row_ids or not columns or not all(matchable(t) for t in self.key_types(len(columns)))

    @property
    def grouped(self) -> bool:
        """One stored row per tuple (else as the rows come: the class text)."""
        return self.distinct or self.stores_row_id

    def hidden_columns(self):
        return [COUNT]

    def storage_columns(self) -> list[str]:
        return ([ROW_ID] if self.stores_row_id else []) + self.user_columns + self.hidden_columns()

    def match_columns(self) -> list[str]:
        return [ROW_ID] if self.stores_row_id else list(self.user_columns)

    def typed_args(self) -> list:
        # The columns' types choose whether a row id is stored (stores_row_id).
        return [] if self.row_ids else [(f"{KEY_TYPE}{i}", col(c)) for i, c in enumerate(self.input.columns)]

    def args_query(self, ctx: Context) -> exp.Select:
        args = [alias(arg, f"a{i}") for i, (_, arg) in enumerate(self.typed_args())]
        return select_from(args, sub(plain(self.input, ctx, "new"), ctx.alias("ty")))

    def _view(self, query: exp.Select) -> exp.Select:
        if self.distinct:
            return query
        # Repeat each tuple __dvm_count times (bag semantics: duplicates kept).
        return repeat_rows(query, col(COUNT), "__dvm_rep")

    def full_sql(self, ctx: Context) -> exp.Select:
        cols = self.input.columns
        source = plain(self.input, ctx, "new")
        named = [alias(col(c), s) for c, s in zip(cols, self.user_columns)]
        if not self.grouped:
            one = exp.Cast(this=exp.Literal.number(1), to=exp.DataType.build("bigint"))
            return select_from(named + [alias(one, COUNT)], sub(source, ctx.alias("b")))
        named.append(alias(exp.Count(this=exp.Star()), COUNT))
        if self.stores_row_id:
            named.insert(0, alias(row_id(cols), ROW_ID))
        query = select_from(named, sub(source, ctx.alias("b")))
        return query.group_by(*[col(c) for c in cols], copy=False) if cols else query

    @property
    def may_send_change(self) -> bool:
        return not self.grouped

    def merge_sql(self, ctx: Context, storage: exp.Expr, types: dict):
        d = delta(self.input, ctx)
        if d is None:
            return None
        cols = self.input.columns
        if self.sends_change(ctx):
            # The engine resolves the actions (runtime/delta/embedded/bag_lookup.py): the change
            # is named once, so nothing is computed first either.
            named = [
                _cast(col(c), types.get(u)).as_(u) if types.get(u) else alias(col(c), u)
                for c, u in zip(cols, self.user_columns)
            ]
            return select_from(named + [col(WEIGHT)], sub(consolidate(ctx, d, cols, fold=True), ctx.alias("d")))
        dd, s = ctx.alias("d"), ctx.alias("s")
        count = exp.Add(
            this=exp.Coalesce(this=col(COUNT, s), expressions=[exp.Literal.number(0)]), expression=col(WEIGHT, dd)
        )
        consolidated = delta_once(ctx, consolidate(ctx, d, cols, fold=True))
        existed = exp.Not(this=exp.Is(this=col(COUNT, s), expression=exp.Null()))  # a stored count is never NULL
        m = select_from(
            [alias(col(c, dd), u) for c, u in zip(cols, self.user_columns)]
            + [alias(count, COUNT), alias(existed, "__dvm_existed")],
            sub(consolidated, dd),
        )
        match = self.match_columns()
        if self.stores_row_id:
            m.expressions.insert(0, alias(row_id(cols, dd), ROW_ID))
            touched = touched_storage(ctx, storage, consolidated, lambda t: [row_id(cols, t)])
            on: exp.Expr = exp.EQ(this=col(ROW_ID, s), expression=row_id(cols, dd))
        elif self.grouped:
            touched = touched_storage(ctx, storage, consolidated, lambda t: [col(c, t) for c in cols], match)
            on = matches(match, s, cols, dd)
        else:
            # Stored as the rows come: a tuple gaining rows is one more stored row (an insert),
            # whatever is stored already; only the tuples losing rows are looked up. A change
            # that only adds rows does not read the stored result (an empty broadcast side of
            # touched_storage's semi join, which Spark then does not scan for).
            losing = exp.LT(this=col(WEIGHT, dd), expression=exp.Literal.number(0))
            lost = select_from([exp.Star()], sub(consolidated.copy(), dd)).where(losing.copy(), copy=False)
            touched = touched_storage(ctx, storage, lost, lambda t: [col(c, t) for c in cols], match)
            touched = _per_tuple(ctx, touched, match)
            m.expressions.extend([alias(col(STORED_ROWS, s), STORED_ROWS), alias(col(WEIGHT, dd), WEIGHT)])
            on = exp.and_(matches(match, s, cols, dd), losing)
        m = m.join(sub(touched, s), on=on, join_type="LEFT", copy=False)
        gone = exp.LTE(this=col(COUNT), expression=exp.Literal.number(0))
        # Grouped: one action per tuple; as rows: one or two per tuple, exploded below.
        action = exp.If(this=gone, true=literal(DELETE), false=literal(UPSERT)) if self.grouped else col(ACTS)
        out = ([col(ROW_ID)] if self.stores_row_id else []) + [alias(action, ACTION)]
        out += [_cast(col(u), types.get(u)).as_(u) if types.get(u) else col(u) for u in self.user_columns]
        out.append(_cast(col(COUNT), "bigint").as_(COUNT))
        keep = exp.Not(this=exp.and_(gone.copy(), exp.Not(this=col("__dvm_existed"))))
        query = select_from(out, sub(m, ctx.alias("m"))).where(keep, copy=False)
        if self.grouped:
            return query
        # A gaining tuple: an INSERT. A losing one: gone (DELETE), one stored row updated (UPSERT),
        # or its several stored rows deleted beside an INSERT of what is left.
        gains = exp.GT(this=col(WEIGHT), expression=exp.Literal.number(0))
        several = exp.GTE(this=col(STORED_ROWS), expression=exp.Literal.number(2))
        acts = exp.Case(
            ifs=[
                exp.If(this=gains, true=array(INSERT)),
                exp.If(this=gone.copy(), true=array(DELETE)),
                exp.If(this=several, true=array(DELETE, INSERT)),
            ],
            default=array(UPSERT),
        )
        return explode_into(query, acts, ctx.alias("act"), ACTS)


# The stored rows of a tuple (a bag stored as its rows come): 2 or more are rewritten as one.
STORED_ROWS = "__dvm_rows"
ACTS = "__dvm_act"  # one of a tuple's actions


def _per_tuple(ctx: Context, touched: exp.Expr, match: list) -> exp.Select:
    """The stored rows a MERGE can match, one per tuple: its count summed, its rows counted."""
    t = ctx.alias("t")
    source = touched.copy() if isinstance(touched, exp.Table) else sub(touched, t)
    return select_from(
        [col(c) for c in match]
        + [alias(exp.Sum(this=col(COUNT)), COUNT), alias(exp.Count(this=exp.Star()), STORED_ROWS)],
        source,
    ).group_by(*[col(c) for c in match], copy=False)
