"""How the root of the tree is stored, and how a delta becomes rows to MERGE into it.

Three layouts, met by `__dvm_row_id` (md5, or a group key's text) or by their own columns:

* AggregateResult — root is Project(Filter?(Aggregate)): one stored row per group with the
  group key, each aggregate's state (python_helpers.dvm.aggregate_state), `__dvm_count` (rows in
  the group) and `__dvm_having` (the HAVING predicate; groups failing it stay stored, hidden
  by the view, so their state is at hand when they come back).
* BagResult (dvm/bag_result.py) — anything else: tuples with their multiplicity `__dvm_count`
  (the counting algorithm), met by the tuple's columns: stored as the rows come (a tuple may be
  several rows whose counts add up), or one row per tuple for SELECT DISTINCT / UNION and where
  a row id is stored; the view repeats a row `__dvm_count` times, or shows a distinct tuple once.
* KeyedBagResult (dvm/keyed_result.py) — a bag declared unique by `unique_key`: one stored row
  per key, the query's columns alone (as a `table` model), built without grouping.

`full_sql` computes the whole stored table; `merge_sql` computes, for the groups / tuples the
delta touches, the new stored row and an action ('U' upsert, 'D' delete; 'I', an insert that
meets no stored row, beside the 'D' of a bag's tuple stored as several rows), leaving out rows
whose stored value would not change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from sqlglot import exp

from python_helpers.dvm import aggregate_state as state
from python_helpers.dvm.differentiate import delta, plain
from python_helpers.dvm.merge_actions import ACTION, DELETE, UPSERT, literal
from python_helpers.dvm.restrict import restricted
from python_helpers.dvm.sqlgen import (
    Context,
    alias,
    col,
    counting_flag,
    is_flag_never_set,
    known_empty,
    null_safe_match,
    part_of_final,
    plain_key_id,
    repeat_rows,
    row_id,
    select_from,
    sub,
)
from python_helpers.dvm.stored_reads import COUNT, HAVING, ROW_ID, delta_once, touched_storage
from python_helpers.dvm.tree import RESCAN, WEIGHT, Aggregate, Distinct, Filter, Node, Project
from python_helpers.errors import UnsupportedSql

_SAFE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The column of a group's new state that says its state must be rescanned from the new snapshot.
RESCAN_FLAG = "__dvm_rescan"


def storage_names(model: str, output_names: list[str]) -> list[str]:
    """Stored column name per output column: the name itself when Delta accepts it as is."""
    seen = set()
    for name in output_names:
        if name.lower() in seen:
            raise UnsupportedSql(
                model, f"the query returns two columns named '{name}' (a table cannot; give them distinct aliases)"
            )
        seen.add(name.lower())
    return [
        n if _SAFE.fullmatch(n) and not n.lower().startswith("__dvm") else f"__dvm_col_{i}"
        for i, n in enumerate(output_names)
    ]


def _cast(e: exp.Expr, type_: str | None) -> exp.Expr:
    return exp.Cast(this=e, to=exp.DataType.build(type_)) if type_ else e


@dataclass
class StoredResult:
    model: str
    output_names: list[str]  # the query's column names as Spark reports them
    user_columns: list[str]  # their stored names

    kind = "bag"

    def hidden_columns(self) -> list[str]:
        raise NotImplementedError

    def storage_columns(self) -> list[str]:
        return [ROW_ID] + self.user_columns + self.hidden_columns()

    def match_columns(self) -> list[str]:
        """The stored columns a merge row meets its stored row by (stored_reads.matches)."""
        return [ROW_ID]

    def _view(self, query: exp.Select) -> exp.Select:
        raise NotImplementedError

    top_k = None  # sql.top_k.TopK: the view shows only the query's first rows

    def view_sql(self, storage: exp.Expr, types: dict | None = None) -> exp.Select:
        cols = [
            exp.alias_(col(s), n, quoted=True) if s != n else col(s)
            for s, n in zip(self.user_columns, self.output_names)
        ]
        view = self._view(select_from(cols, storage))
        if self.top_k is None:
            return view
        orderable = [not (types or {}).get(u, "").startswith("map") for u in self.user_columns]
        return self.top_k.apply(view, self.output_names, orderable)


# The names under which a group key's or a declared unique key's Spark types are kept beside the
# aggregate arguments' (MaintainedResult.arg_types): they choose the row id's form.
KEY_TYPE = "__dvm_key_type_"


class MaintainedResult(StoredResult):
    """A result the operator tree maintains: built by `full_sql`, changed by `merge_sql`."""

    def __init__(self, model: str, output_names: list[str], user_columns: list[str]):
        super().__init__(model, output_names, user_columns)
        # Spark types of aggregate arguments, by aggregate name: the engine asks Spark's analyser
        # for those `typed_args` names (exact or DOUBLE accumulation depends on them).
        self.arg_types: dict = {}

    def typed_args(self) -> list:
        """(aggregate name, argument) pairs whose Spark type the engine should look up."""
        return []

    def key_types(self, count: int) -> list:
        """The Spark types of the first `count` key columns (KEY_TYPE), None where not known."""
        return [self.arg_types.get(f"{KEY_TYPE}{i}") for i in range(count)]

    def args_query(self, ctx: Context) -> exp.Select:
        """A query whose columns are the `typed_args` arguments (analysed, never run)."""
        raise NotImplementedError

    def full_sql(self, ctx: Context) -> exp.Select:
        """The stored rows (user, hidden and state columns) at the new versions."""
        raise NotImplementedError

    def merge_sql(self, ctx: Context, storage: exp.Expr, types: dict) -> exp.Expr | None:
        """The rows to MERGE into `storage` for this refresh's change; None when nothing changes."""
        raise NotImplementedError

    @property
    def may_send_change(self) -> bool:
        """Whether the layout can send its consolidated change for the engine to resolve (a bag
        stored as its rows come): only then is the engine asked (Context.engine_looks_up)."""
        return False

    def sends_change(self, ctx: Context) -> bool:
        """Whether `merge_sql` gives the consolidated change (the user columns and __dvm_w) for
        the engine to resolve against the stored rows (Context.engine_looks_up) rather than
        the MERGE rows themselves."""
        return ctx.engine_looks_up and self.may_send_change


class AggregateResult(MaintainedResult):
    kind = "aggregate"

    def __init__(self, model, output_names, user_columns, project: Project, having, agg: Aggregate):
        super().__init__(model, output_names, user_columns)
        self.project, self.having, self.agg = project, having, agg
        self.keyed = bool(agg.keys)
        self.key_store = [f"__dvm_key_{i}" for i in range(len(agg.keys))]
        self.agg_store = [f"__dvm_agg_{j}" for j in range(len(agg.aggs))]

    # Stored state names: keys, count, then each aggregate's value and aux columns.
    def state_columns(self) -> list[str]:
        out = list(self.key_store) + [COUNT]
        for a, name in zip(self.agg.aggs, self.agg_store):
            out += [name] + [f"{name}_{s}" for s in state.aux_suffixes(a)]
        return out

    def hidden_columns(self):
        return ([HAVING] if self.having is not None else []) + self.state_columns()

    def _view(self, query: exp.Select) -> exp.Select:
        return query.where(col(HAVING), copy=False) if self.having is not None else query

    def _rename_to_store(self, expression: exp.Expr) -> exp.Expr:
        mapping = dict(zip(self.agg.key_names, self.key_store))
        mapping.update({a.name: s for a, s in zip(self.agg.aggs, self.agg_store)})
        return expression.copy().transform(
            lambda n: col(mapping[n.name]) if isinstance(n, exp.Column) and n.name in mapping else n
        )

    def _finish(self, state_query: exp.Expr, ctx: Context, types: dict) -> exp.Select:
        """Row id, user columns, HAVING flag and state columns over rows holding the state."""
        cols = [alias(self._id(), ROW_ID)]
        for e, u in zip(self.project.exprs, self.user_columns):
            cols.append(alias(_cast(self._rename_to_store(e), types.get(u)), u))
        if self.having is not None:
            flag = exp.Coalesce(this=self._rename_to_store(self.having), expressions=[exp.false()])
            cols.append(alias(flag, HAVING))
        cols += [alias(_cast(col(c), types.get(c)), c) if types.get(c) else col(c) for c in self.state_columns()]
        return select_from(cols, sub(state_query, ctx.alias("st")))

    def _state_from_rows(self, ctx: Context, rows: exp.Expr) -> exp.Select:
        cols = [alias(k.copy(), s) for k, s in zip(self.agg.keys, self.key_store)]
        cols.append(alias(exp.Count(this=exp.Star()), COUNT))
        for a, name in zip(self.agg.aggs, self.agg_store):
            cols += state.state_exprs(a, name, self.arg_types.get(a.name))
        query = select_from(cols, sub(rows, ctx.alias("a")))
        return query.group_by(*[k.copy() for k in self.agg.keys], copy=False) if self.keyed else query

    def typed_args(self) -> list:
        args = [(a.name, a.arg) for a in self.agg.aggs if a.kind in state.VAR_KINDS + ("sum", "avg")]
        # The group key's types choose the row id's form (_id).
        return args + [(f"{KEY_TYPE}{i}", k) for i, k in enumerate(self.agg.keys)]

    def _id(self, table: Optional[str] = None) -> exp.Expr:
        """A group's row id: its key's text where the key is of plain types
        (sqlgen.plain_key_id), else the md5 of its JSON form (sqlgen.row_id)."""
        return plain_key_id(self.key_store, table, self.key_types(len(self.key_store))) or row_id(self.key_store, table)

    def args_query(self, ctx: Context) -> exp.Select:
        args = [alias(arg.copy(), f"a{i}") for i, (_, arg) in enumerate(self.typed_args())]
        return select_from(args, sub(plain(self.agg.child, ctx, "new"), ctx.alias("ty")))

    def full_sql(self, ctx: Context) -> exp.Select:
        return self._finish(self._state_from_rows(ctx, plain(self.agg.child, ctx, "new")), ctx, {})

    def merge_sql(self, ctx: Context, storage: exp.Expr, types: dict):
        child_delta = delta(self.agg.child, ctx)
        if child_delta is None:
            return None
        # 1. Per-group delta state.
        dcols = [alias(k.copy(), s) for k, s in zip(self.agg.keys, self.key_store)]
        dcols.append(alias(exp.Sum(this=col(WEIGHT)), f"{COUNT}_d"))
        for a, name in zip(self.agg.aggs, self.agg_store):
            dcols += state.delta_exprs(a, name, self.arg_types.get(a.name))
        if any(state.needs_unit_weights(a, self.arg_types.get(a.name)) for a in self.agg.aggs):
            child_delta = _unit_weights(child_delta, self.agg.child.columns)
        per_row = [e for a, name in zip(self.agg.aggs, self.agg_store) for e in state.row_exprs(a, name, self.agg.keys)]
        if per_row:
            child_delta = select_from([exp.Star(), *per_row], sub(child_delta, ctx.alias("dn")))
        dq = select_from(dcols, sub(child_delta, ctx.alias("dl")))
        if self.keyed:
            dq = dq.group_by(*[k.copy() for k in self.agg.keys], copy=False)
        # 2. Join the stored state; compute the new state algebraically where possible.
        d, o = ctx.alias("d"), ctx.alias("o")
        # A global aggregate yields one delta row even when its filtered delta is empty (SUM = NULL).
        count = exp.Add(
            this=exp.Coalesce(this=col(COUNT, o), expressions=[exp.Literal.number(0)]),
            expression=exp.Coalesce(this=col(f"{COUNT}_d", d), expressions=[exp.Literal.number(0)]),
        )
        mcols = [col(k, d) for k in self.key_store] + [alias(count, COUNT)]
        rescans = []
        for a, name in zip(self.agg.aggs, self.agg_store):
            new_cols, needs = state.new_state(a, name, o, d, types, self.arg_types.get(a.name))
            mcols += new_cols
            rescans.append(needs)
        alive = exp.GT(this=count.copy(), expression=exp.Literal.number(0)) if self.keyed else exp.true()
        flag = exp.and_(alive, exp.or_(*rescans)) if rescans else exp.false()
        mcols += [
            alias(flag, RESCAN_FLAG),
            alias(exp.Not(this=exp.Is(this=col(ROW_ID, o), expression=exp.Null())), "__dvm_existed"),
        ]
        # One digest of the stored row (not a copy of each column): far less for Spark to
        # analyse and carry, and enough to drop the rows whose stored value would not change.
        compare = self.storage_columns()[1:]
        mcols.append(alias(row_id(compare, o), "__dvm_old_digest"))
        dq_once = delta_once(ctx, dq)
        touched = touched_storage(ctx, storage, dq_once, lambda t: [self._id(t)])
        m = select_from(mcols, sub(dq_once, d)).join(
            sub(touched, o),
            on=exp.EQ(this=col(ROW_ID, o), expression=self._id(d)),
            join_type="LEFT",
            copy=False,
        )
        # 3. Groups flagged for rescan take their whole state from the new snapshot.
        mm, r = ctx.alias("m"), ctx.alias("r")
        state_names = self.state_columns()
        flags_first = self._flags_first(ctx)
        if flags_first:
            # Few groups: their new state is computed once, and the rescan (a scan of the whole
            # input) only runs when one of them needs it; mostly none does.
            m = ctx.materialize(counting_flag(part_of_final(m), RESCAN_FLAG))  # type: ignore[misc,assignment]
        rescanned = self._rescan(ctx, m, flags_first)
        if rescanned is None:
            pick: list[exp.Expr] = [col(c, mm) for c in state_names]
        else:
            # Both branches in the stored type: Spark would give IF(DECIMAL(38, 22), DECIMAL(38, 18))
            # the type DECIMAL(38, 18) and round the rescanned value.
            pick = [
                alias(
                    exp.If(
                        this=col(RESCAN_FLAG, mm),
                        true=_cast(
                            exp.Coalesce(this=col(c, r), expressions=[exp.Literal.number(0)])
                            if c == COUNT
                            else col(c, r),
                            types.get(c),
                        ),
                        false=_cast(col(c, mm), types.get(c)),
                    ),
                    c,
                )
                if c not in self.key_store
                else col(c, mm)
                for c in state_names
            ]
        pick += [col("__dvm_existed", mm), col("__dvm_old_digest", mm)]
        merged = select_from(pick, sub(m, mm))
        if rescanned is not None:
            on = exp.and_(col(RESCAN_FLAG, mm), null_safe_match(self.key_store, self.key_store, mm, r))
            merged = merged.join(sub(rescanned, r), on=on, join_type="LEFT", copy=False)
        # 4. Finish the stored row; decide the action; drop rows that would not change.
        f = ctx.alias("f")
        finished = self._finish(merged, ctx, types)
        finished.expressions.extend([col("__dvm_existed"), col("__dvm_old_digest")])
        gone = exp.LTE(this=col(COUNT, f), expression=exp.Literal.number(0)) if self.keyed else exp.false()
        action = exp.If(this=gone, true=literal(DELETE), false=literal(UPSERT))
        outs = [col(ROW_ID, f), alias(action, ACTION)] + [col(c, f) for c in self.storage_columns()[1:]]
        # The new row's columns carry the stored types (cast in _finish), so equal values give
        # equal JSON; the only values that differ in JSON but compare equal (-0.0 and 0.0) cost
        # a harmless rewrite of an unchanged row.
        changed = exp.NEQ(this=row_id(compare, f), expression=col("__dvm_old_digest", f))
        keep = exp.or_(
            exp.and_(gone.copy(), col("__dvm_existed", f)),
            exp.and_(exp.Not(this=gone.copy()), exp.or_(exp.Not(this=col("__dvm_existed", f)), changed)),
        )
        return select_from(outs, sub(finished, f)).where(keep, copy=False)

    def _flags_first(self, ctx: Context) -> bool:
        """Compute the groups' new state and their rescan flags before the rescan? When the engine
        can materialize, the delta is small, and every aggregate only rescans on a condition
        (MIN/MAX losing its extremum, a wide value): an empty set of flagged groups then lets
        Spark drop the rescan of the input (bound_views.materialize). For a global aggregate
        that rescan is a scan of its whole input, on every refresh otherwise. An aggregate that
        always rescans its touched groups gains nothing from it."""
        return (
            ctx.small_delta
            and ctx.materialize is not None
            and all(a.strategy != RESCAN for a in self.agg.aggs)
            and any(self._may_rescan(a) for a in self.agg.aggs)
        )

    def _may_rescan(self, agg) -> bool:
        """Can a group need a rescan for this aggregate (always, or on a condition)?"""
        return agg.strategy != "algebraic" or state.may_rescan(agg, self.arg_types.get(agg.name))

    def _rescan(self, ctx: Context, m: exp.Select, flags_first: bool = False):
        if not any(self._may_rescan(a) for a in self.agg.aggs):
            return None
        if is_flag_never_set(m):
            return None  # the engine counted no flagged group while it computed them
        # The input's new rows are rendered only once the flags are known not to be empty: a
        # rendering binds the source's snapshot (a file listing and a schema job, 0.4 s for the
        # demo's orders) that nothing else may need.
        rows: exp.Expr
        if self.keyed:
            flagged: exp.Expr = select_from([col(k) for k in self.key_store], sub(m.copy(), ctx.alias("fm"))).where(
                col(RESCAN_FLAG), copy=False
            )
            # Under a recursion the restriction goes to its base when the keys are carried
            # (python_helpers.dvm.restrict); the semi join below then only confirms it. The
            # flagged keys are computed first: inlined into the recursion's base, Spark 4.1's
            # optimizer fails on them (MergeScalarSubqueries "generated an invalid plan").
            below_recursion = (
                ctx.materialize is not None
                and restricted(self.agg.child, self.agg.keys, flagged, self.key_store) is not None
            )
            if flags_first or below_recursion:
                flagged = ctx.materialize(flagged)  # type: ignore[misc]
                if known_empty(flagged):
                    return None  # no group needs a rescan
            rows = plain(self.agg.child, ctx, "new")
            if below_recursion:
                below = restricted(self.agg.child, self.agg.keys, flagged, self.key_store)
                if below is not None:  # the shape just checked, now over the materialized keys
                    rows = plain(below, ctx, "new")
            ra, ka = ctx.alias("ra"), ctx.alias("ka")
            on = exp.and_(
                *[exp.NullSafeEQ(this=k.copy(), expression=col(s, ka)) for k, s in zip(self.agg.keys, self.key_store)]
            )
            rows = select_from([exp.Star()], sub(rows, ra)).join(
                sub(flagged, ka), on=on, join_type="LEFT SEMI", copy=False
            )
        elif flags_first:
            # The one group, when it is flagged: Spark cannot see a computed flag is false, but
            # drops the scan when the materialized flag is known empty.
            flag = ctx.materialize(  # type: ignore[misc]
                select_from([alias(exp.Literal.number(1), "__dvm_one")], sub(m.copy(), ctx.alias("fm"))).where(
                    col(RESCAN_FLAG), copy=False
                )
            )
            if known_empty(flag):
                return None  # the group needs no rescan
            rows = select_from([exp.Star()], sub(plain(self.agg.child, ctx, "new"), ctx.alias("ra"))).join(
                sub(flag, ctx.alias("ka")), on=exp.true(), join_type="LEFT SEMI", copy=False
            )
        else:
            rows = plain(self.agg.child, ctx, "new")
        return self._state_from_rows(ctx, rows)


class RecomputeResult(StoredResult):
    """A query outside the differential set: stored as its plain rows, rebuilt on every refresh."""

    kind = "recompute"

    def hidden_columns(self):
        return []

    def _view(self, query: exp.Select) -> exp.Select:
        return query

    def storage_columns(self) -> list[str]:
        return list(self.user_columns)


def _unit_weights(delta_query: exp.Expr, columns: list) -> exp.Select:
    """Each delta row repeated |w| times with weight ±1, for aggregates that add ±x because
    x * w would lose digits (wide DECIMALs). Costs the delta's total |weight| in rows, which
    is its row count unless it repeats rows (duplicates, a bag upstream's counts)."""
    w = col(WEIGHT)
    sign = exp.Cast(this=exp.Anonymous(this="signum", expressions=[w.copy()]), to=exp.DataType.build("bigint"))
    query = select_from([col(c) for c in columns] + [alias(sign, WEIGHT)], sub(delta_query, "__dvm_uw"))
    query = repeat_rows(query, exp.Abs(this=w.copy()), "__dvm_rep")
    return query.where(exp.NEQ(this=w.copy(), expression=exp.Literal.number(0)), copy=False)


def plan_stored_result(
    model: str,
    root: Node,
    output_names: list[str],
    top_k=None,
    unique_key: list[str] | None = None,
    keeps_row_ids: bool = False,
) -> MaintainedResult:
    """The stored layout of `root`'s result (`keeps_row_ids`: DeltaEngine's)."""
    result = _layout(model, root, output_names, unique_key or [], keeps_row_ids)
    result.top_k = top_k
    return result


def _layout(
    model: str, root: Node, output_names: list[str], unique_key: list[str], keeps_row_ids: bool
) -> MaintainedResult:
    # The bag layouts import this module: imported here, when asked for.
    from python_helpers.dvm.bag_result import BagResult
    from python_helpers.dvm.keyed_result import KeyedBagResult, key_columns

    users = storage_names(model, output_names)
    bag_input, distinct = (root.child, True) if isinstance(root, Distinct) else (root, False)
    if isinstance(root, Project):
        below, having = root.child, None
        if isinstance(below, Filter) and isinstance(below.child, Aggregate):
            having = below.predicate
            below = below.child
        if isinstance(below, Aggregate):
            if unique_key:  # checked, but an aggregate is stored by its group key already
                key_columns(model, unique_key, output_names, output_names)
            return AggregateResult(model, output_names, users, root, having, below)
    if unique_key:
        key = key_columns(model, unique_key, output_names, bag_input.columns)
        return KeyedBagResult(model, output_names, users, bag_input, distinct, key, keeps_row_ids)
    return BagResult(model, output_names, users, bag_input, distinct, keeps_row_ids)
