"""The keyed layout: a bag result the model declares unique by `unique_key` (dbt's config of
that name), stored one row per key. Chosen by stored_result.plan_stored_result."""

from __future__ import annotations

from sqlglot import exp

from python_helpers.dvm.bag_result import BagResult
from python_helpers.dvm.differentiate import delta, plain
from python_helpers.dvm.merge_actions import ACTION, DELETE, UPSERT, literal
from python_helpers.dvm.sqlgen import Context, alias, col, consolidate, plain_key_id, row_id, select_from, sub
from python_helpers.dvm.stored_reads import ROW_ID, delta_once, matches, touched_storage
from python_helpers.dvm.stored_result import KEY_TYPE, _cast
from python_helpers.dvm.tree import WEIGHT, Node
from python_helpers.errors import InvalidConfig

# The Spark types of a one-column key that an engine listing keys by one column (the spark
# engine's REPLACE WHERE <column> IN (...)) lists as they are: Delta takes that predicate as a
# filter of the column itself, which a cast of a narrower integer would not be.
LISTABLE_KEY_TYPES = frozenset({"int", "bigint", "string"})

# Spark's raise_error text when a refresh would break a declared unique_key.
UNIQUE_KEY_BROKEN = "is not unique: this change gives a key a second row"


class KeyedBagResult(BagResult):
    """A bag whose rows the model declares unique by `unique_key` (dbt's config of that name):
    one stored row per key, stored as the query's own columns and nothing else, so a full build
    writes what the same query as a `table` model writes. A stored row is found by the key's
    columns (match_columns; NULL meets NULL), not by a row id: the text of a 6 M-row fact's key
    written beside its columns cost its full build 1.1-1.5 s over the table model's 8-10 s.

    A full build is a projection (no GROUP BY over all columns), the view shows the stored rows
    as they are (no repetition), and a refresh reads only the stored key columns: per key of the
    consolidated delta, a tuple gaining weight is upserted and a key that only loses one is
    deleted. The key is checked where a refresh can see it break: a change that gives one key
    two tuples, removes one twice, or adds a tuple under a key the stored result already holds
    (without removing that one) fails the refresh, naming the model and the key, before
    anything is written.

    With `row_ids` (the spark engine's: DeltaEngine.keeps_row_ids), a key that is not one column
    of LISTABLE_KEY_TYPES has its text (or its digest, for a key of other than the plain types
    of sqlgen.plain_key_id) stored beside them as `__dvm_row_id`, and rows are met by it. Which one a
    result has follows the key's Spark types (typed_args), so it is known once they are."""

    def __init__(
        self, model, output_names, user_columns, input_node: Node, distinct: bool, key: list[str], row_ids: bool
    ):
        super().__init__(model, output_names, user_columns, input_node, distinct, row_ids)
        self.key = list(key)  # input column names
        self.key_store = [user_columns[input_node.columns.index(c)] for c in self.key]  # their stored names
        self.kind = "keyed"

    @property
    def stores_row_id(self) -> bool:
        if not self.row_ids:
            return False
        types = self.key_types(len(self.key))
        return not (len(types) == 1 and types[0] in LISTABLE_KEY_TYPES)

    def hidden_columns(self) -> list[str]:
        return []

    @property
    def may_send_change(self) -> bool:
        return False  # one stored row per key: its MERGE rows need no stored counts

    def match_columns(self) -> list[str]:
        return [ROW_ID] if self.stores_row_id else list(self.key_store)

    def typed_args(self) -> list:
        # The key columns' types choose whether a row id is stored and its form (plain_key_id,
        # else a digest).
        return [(f"{KEY_TYPE}{i}", col(c)) for i, c in enumerate(self.key)] if self.row_ids else []

    def _id(self, table: str) -> exp.Expr:
        return plain_key_id(self.key, table, self.key_types(len(self.key))) or row_id(self.key, table)

    def _view(self, query: exp.Select) -> exp.Select:
        return query  # one stored row per key, each shown once

    def full_sql(self, ctx: Context) -> exp.Select:
        b = ctx.alias("b")
        columns = [alias(col(c, b), u) for c, u in zip(self.input.columns, self.user_columns)]
        if self.stores_row_id:
            columns.insert(0, alias(self._id(b), ROW_ID))
        return select_from(columns, sub(plain(self.input, ctx, "new"), b))

    def merge_sql(self, ctx: Context, storage: exp.Expr, types: dict):
        d = delta(self.input, ctx)
        if d is None:
            return None
        cols = self.input.columns
        c, k, st = ctx.alias("c"), ctx.alias("k"), ctx.alias("st")
        values = [f"__dvm_v{i}" for i in range(len(cols))]
        keys = [f"__dvm_key{i}" for i in range(len(self.key))]
        w = col(WEIGHT, c)
        zero = exp.Literal.number(0)
        gained = exp.Sum(this=exp.If(this=exp.GT(this=w.copy(), expression=zero.copy()), true=w.copy(), false=zero))
        lost = exp.Sum(
            this=exp.If(
                this=exp.LT(this=w.copy(), expression=zero.copy()), true=exp.Neg(this=w.copy()), false=zero.copy()
            )
        )
        # The tuple of the largest weight: the new one where the key gains a tuple.
        fields = [x for v, n in zip(values, cols) for x in (exp.Literal.string(v), col(n, c))]
        newest = exp.Anonymous(
            this="max_by", expressions=[exp.Anonymous(this="named_struct", expressions=fields), w.copy()]
        )
        consolidated = delta_once(ctx, consolidate(ctx, d, cols, fold=True))
        # Per key: its columns (and its row id where one is stored).
        by = [alias(col(n, c), name) for n, name in zip(self.key, keys)]
        if self.stores_row_id:
            by.append(alias(self._id(c), ROW_ID))
        per_key = select_from(
            by + [alias(gained, "__dvm_gained"), alias(lost, "__dvm_lost"), alias(newest, "__dvm_new")],
            sub(consolidated, c),
        ).group_by(*[col(n, c) for n in self.key], copy=False)
        match = self.match_columns()
        delta_keys = [ROW_ID] if self.stores_row_id else keys
        # Only the stored keys of the keys the change gives a tuple without taking one away: only
        # those can break the key by meeting a stored row (an update removes the key's old
        # tuple). Scattered updates name none, and Spark then skips the stored result's scan (an
        # empty broadcast side of the semi join).
        only_gaining = select_from([exp.Star()], sub(per_key.copy(), ctx.alias("g"))).where(
            exp.EQ(this=col("__dvm_lost"), expression=zero.copy()), copy=False
        )
        touched = touched_storage(
            ctx, storage, only_gaining, lambda t: [col(n, t) for n in delta_keys], stored_keys=match
        )
        if isinstance(touched, exp.Table):
            touched = select_from([exp.Star()], touched.copy())
        stored_keys = select_from(
            [col(s) for s in match] + [alias(exp.true(), "__dvm_stored")], sub(touched, ctx.alias("ts"))
        )
        gains, loses = col("__dvm_gained", k), col("__dvm_lost", k)
        one = exp.Literal.number(1)
        stored = exp.Not(this=exp.Is(this=col("__dvm_stored", st), expression=exp.Null()))
        broken = exp.or_(
            exp.GT(this=gains.copy(), expression=one.copy()),
            exp.GT(this=loses.copy(), expression=one.copy()),
            exp.and_(exp.EQ(this=loses.copy(), expression=zero.copy()), stored),
        )
        action = exp.Case(
            ifs=[
                exp.If(this=broken, true=exp.Cast(this=self._violation(), to=exp.DataType.build("string"))),
                exp.If(this=exp.EQ(this=gains.copy(), expression=one.copy()), true=literal(UPSERT)),
            ],
            default=literal(DELETE),
        )
        out = ([col(ROW_ID, k)] if self.stores_row_id else []) + [alias(action, ACTION)]
        for v, u in zip(values, self.user_columns):
            field = exp.Dot(this=col("__dvm_new", k), expression=exp.to_identifier(v))
            out.append(alias(_cast(field, types.get(u)), u))
        on = matches(match, st, delta_keys, k)
        return select_from(out, sub(per_key, k)).join(sub(stored_keys, st), on=on, join_type="LEFT", copy=False)

    def _violation(self) -> exp.Expr:
        cols = self.input.columns
        names = ", ".join(self.output_names[cols.index(n)] for n in self.key)
        text = (
            f"unique_key ({names}) {UNIQUE_KEY_BROKEN} (two new rows, or a new row under a key the stream "
            "table already holds)"
        )
        return exp.Anonymous(this="raise_error", expressions=[exp.Literal.string(text)])


def key_columns(model: str, unique_key: list[str], output_names: list[str], columns: list[str]) -> list[str]:
    """The input columns of the `unique_key` output names (case-insensitive, as Spark)."""
    by_name = {n.lower(): c for n, c in zip(output_names, columns)}
    missing = [k for k in unique_key if k.lower() not in by_name]
    if missing:
        raise InvalidConfig(
            model,
            f"unique_key names {', '.join(missing)}, which the query does not return "
            f"(its columns: {', '.join(output_names)})",
            "name columns of the query's result in unique_key, or remove it",
        )
    return [by_name[k.lower()] for k in unique_key]
