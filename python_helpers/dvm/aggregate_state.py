"""Per-aggregate state kept in the stored result, and its algebraic / semi-algebraic update.

Each AggCall j keeps its value in `__dvm_agg_j` plus auxiliary columns:
  count, count(*)          value only (new = old + Σw)
  sum                      value, _nn (non-NULL count; the sum is NULL when _nn = 0)
  avg                      value, _sum, _nn (value = _sum / _nn, cast as Spark's AVG does)
  var_*/stddev_*           value, _nn, _s (Σx), _q (Σx²), as DOUBLE
  min / max                value; LEAST/GREATEST with inserted values, rescan of the group
                           only when a value removed (net, per value) reaches the extremum
  other                    value; the group is re-aggregated from the new snapshot

One `AggregateStrategy` subclass per family (at the end of this module) holds its state
columns, its delta aggregates, its update and when it rescans; `strategy_for` finds it by
AggCall.kind. A new algebraic aggregate is one more subclass (and its kind in sql/aggregates.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from sqlglot import exp

from python_helpers.dvm.sqlgen import alias, col
from python_helpers.dvm.tree import WEIGHT, AggCall

VAR_KINDS = ("var_pop", "var_samp", "stddev_pop", "stddev_samp")


def _double(e: exp.Expr) -> exp.Expr:
    return exp.Cast(this=e.copy(), to=exp.DataType.build("double"))


_EXACT = re.compile(r"^(tinyint|smallint|int|bigint|decimal\((\d+),\s*(\d+)\))$")


def moment_type(arg_type: str | None) -> str:
    """Type in which Σx and Σx² are kept for the variance family.

    Exact inputs (integers, DECIMAL) accumulate exactly in DECIMAL(38, scale), so repeated
    refreshes cannot drift and Σx² − (Σx)²/n does not cancel away precision; DOUBLE inputs
    accumulate in DOUBLE, as Spark's own aggregate does.
    """
    match = _EXACT.match((arg_type or "").replace(" ", ""))
    if not match:
        return "double"
    scale = int(match.group(3)) if match.group(3) else 0
    return f"decimal(38,{scale})"


def _as(e: exp.Expr, type_: str) -> exp.Expr:
    return exp.Cast(this=e.copy(), to=exp.DataType.build(type_))


def _case(cond: exp.Expr, then: exp.Expr, default: exp.Expr | None = None) -> exp.Case:
    case = exp.Case(ifs=[exp.If(this=cond, true=then)])
    return case.else_(default, copy=False) if default is not None else case


_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")


def _decimal(type_: str | None) -> tuple[int, int] | None:
    match = _DECIMAL.match((type_ or "").replace(" ", ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def exact_times_weight(value_type: str | None) -> bool:
    """Is x * w exact? A DECIMAL(p, s) times a BIGINT weight is DECIMAL(p + 21, s) in Spark,
    whose scale Spark cuts once that exceeds 38 digits; integers and DOUBLE multiply as usual."""
    dec = _decimal(value_type)
    return dec is None or dec[0] + 21 <= 38


def _weighted(value: exp.Expr, value_type: str | None) -> exp.Expr:
    """x times the row's weight, exactly. Where the product would lose digits (a wide
    DECIMAL), x is taken as +x or -x by the weight's sign: the caller expands the delta's rows
    to weights of ±1 first (needs_unit_weights)."""
    if exact_times_weight(value_type):
        return exp.Mul(this=value.copy(), expression=col(WEIGHT))
    return _case(exp.GT(this=col(WEIGHT), expression=exp.Literal.number(0)), value.copy(), exp.Neg(this=value.copy()))


def exact_sum_type(type_: str | None) -> bool:
    """Can old + delta be added exactly in this stored type? Spark adds two DECIMAL(38, s) in
    DECIMAL(39, s), which exceeds 38 digits, and then keeps only max(s - 1, 6) digits of scale."""
    dec = _decimal(type_)
    return dec is None or dec[0] < 38 or dec[1] <= 6


def _exact_plus(a: exp.Expr, b: exp.Expr, type_: str | None) -> tuple[exp.Expr, exp.Expr]:
    """(a + b computed without losing scale, predicate: the exact sum could not be formed here).

    For DECIMAL(38, s) with s > 6 both operands are narrowed to DECIMAL(37, s), whose sum fits
    DECIMAL(38, s) exactly; an operand too large for that is flagged (the group is rescanned)."""
    dec = _decimal(type_)
    if dec is None or exact_sum_type(type_):
        return exp.Add(this=a, expression=b), exp.false()
    scale = dec[1]
    narrow = exp.DataType.build(f"decimal(37,{scale})")
    bound = exp.Literal.number("1" + "0" * (37 - scale))
    fits = exp.and_(*[exp.LT(this=exp.Abs(this=x.copy()), expression=bound.copy()) for x in (a, b)])
    total = exp.Add(this=exp.Cast(this=a.copy(), to=narrow), expression=exp.Cast(this=b.copy(), to=narrow.copy()))
    return _case(fits, total), exp.Not(this=fits.copy())


def double_variance(agg: AggCall, arg_type: str | None) -> bool:
    """Variance over DOUBLE: Σx² − (Σx)²/n loses everything when a dominant value leaves, so a
    group with deleted values is rescanned (semi-algebraic); inserts stay algebraic."""
    return agg.kind in VAR_KINDS and not moment_type(arg_type).startswith("decimal")


def value_type(agg: AggCall, arg_type: str | None) -> str | None:
    """The type in which the aggregate's running sums are kept."""
    return moment_type(arg_type) if agg.kind in VAR_KINDS else arg_type


def avg_division_exact(arg_type: str | None) -> bool:
    """Does Σx / n, as Spark divides DECIMALs, keep every digit of AVG's result scale?

    Spark's AVG divides at its result scale (s + 4) directly. The maintained value divides the
    stored DECIMAL(P, s) sum by the count as DECIMAL(20, 0), at scale max(6, s + 21) unless
    that exceeds 38 digits of precision and Spark cuts it. Where the cut lands below s + 4 the
    stored value would be rounded early: such groups are re-aggregated instead."""
    dec = _decimal(arg_type)
    if dec is None:
        return True
    p, s = dec
    big_p = min(38, p + 10)
    raw_scale = max(6, s + 21)
    raw_precision = big_p - s + raw_scale
    scale = raw_scale if raw_precision <= 38 else max(38 - (big_p - s), min(raw_scale, 6))
    return scale >= min(38, s + 4)


def _arg(agg: AggCall) -> exp.Expr:
    """The argument of an algebraic aggregate that takes one (all but count_star)."""
    if agg.arg is None:
        raise ValueError(f"aggregate {agg.name} ({agg.kind}) has no argument")
    return agg.arg


def _nonnull_weight(arg: exp.Expr) -> exp.Expr:
    return exp.Sum(
        this=_case(exp.Not(this=exp.Is(this=arg.copy(), expression=exp.Null())), col(WEIGHT), exp.Literal.number(0))
    )


def _variance(kind: str, n: exp.Expr, s: exp.Expr, q: exp.Expr, exact: bool) -> exp.Expr:
    """Variance from count, Σx and Σx²; NULL where Spark's aggregate gives NULL.

    Exact sums: n·Σx² − (Σx)² is computed in DECIMAL, then divided in DOUBLE (one rounding).
    DOUBLE sums: Σx² − (Σx)²/n cancels when the spread is tiny against the mean; results within
    1e-12 of the mean square are taken as exactly 0 (Spark returns 0.0 for constant groups).
    """
    nd = _double(n)
    samp = kind.endswith("samp")
    denom = exp.Sub(this=nd.copy(), expression=exp.Literal.number(1)) if samp else nd.copy()
    if exact:
        big_n = exp.Cast(this=n.copy(), to=exp.DataType.build("decimal(20,0)"))
        m2n = exp.Sub(
            this=exp.Mul(this=big_n, expression=q.copy()), expression=exp.Mul(this=s.copy(), expression=s.copy())
        )
        var: exp.Expr = exp.Div(this=exp.Div(this=_double(m2n), expression=nd.copy()), expression=denom)
    else:
        m2 = exp.Sub(
            this=q.copy(), expression=exp.Div(this=exp.Mul(this=s.copy(), expression=s.copy()), expression=nd.copy())
        )
        var = exp.Div(this=m2, expression=denom)
        floor = exp.Mul(this=exp.Literal.number("1e-12"), expression=exp.Div(this=q.copy(), expression=nd.copy()))
        var = _case(exp.LTE(this=var.copy(), expression=floor), exp.Literal.number("0.0"), var)
    if kind.startswith("stddev"):
        var = exp.Sqrt(this=var)
    minimum = 1 if samp else 0
    return _case(exp.GT(this=n.copy(), expression=exp.Literal.number(minimum)), var)


# -- strategies: one class per family of aggregates -------------------------------------------


def _coalesce0(e: exp.Expr) -> exp.Expr:
    return exp.Coalesce(this=e, expressions=[exp.Literal.number(0)])


def _plus(a: exp.Expr, b: exp.Expr) -> exp.Expr:
    return exp.Add(this=a, expression=b)


@dataclass(frozen=True)
class GroupRefs:
    """Column references of one aggregate in a group: its stored state (table alias `old`, NULL
    when the group is new) and the group's delta (`d`, the columns `delta_exprs` named)."""

    name: str
    old: str
    d: str

    def stored(self, suffix: str = "") -> exp.Expr:
        return col(f"{self.name}{suffix}", self.old)

    def delta(self, suffix: str) -> exp.Expr:
        return col(f"{self.name}{suffix}", self.d)


class AggregateStrategy:
    """How one family of aggregates is kept per group of the stored result.

    Subclasses name the `kinds` they handle (AggCall.kind, from sql/aggregates.py) and are
    registered by being defined. The default is the group rescan: the value alone is stored and
    every changed group is re-aggregated from the new snapshot.
    """

    kinds: ClassVar[tuple[str, ...]] = ()
    # The sqlglot call classes maintained this way, with the kind each gets (COUNT is read by
    # the tree builder itself: COUNT(*), COUNT(x) and COUNT(DISTINCT x) differ).
    calls: ClassVar[dict[type[exp.Expr], str]] = {}
    aux: ClassVar[tuple[str, ...]] = ()  # suffixes of the state columns stored beside the value

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        for kind in cls.kinds:
            _STRATEGIES[kind] = cls()
        _KIND_OF_CALL.update(cls.calls)

    def state_exprs(self, agg: AggCall, name: str, arg_type: str | None) -> list[exp.Expr]:
        """Columns computing the value and its state from plain rows (full build, group rescan)."""
        return [alias(agg.expr.copy(), name)]

    def row_exprs(self, agg: AggCall, name: str, keys: list[exp.Expr]) -> list[exp.Expr]:
        """Columns added to every delta row before it is grouped (window expressions over the
        group's rows), read by delta_exprs; `keys` are the aggregate's grouping expressions."""
        return []

    def delta_exprs(self, agg: AggCall, name: str, arg_type: str | None) -> list[exp.Expr]:
        """Per-group aggregates over the weighted delta (read back by new_state as `d`)."""
        return []

    def new_state(self, agg: AggCall, g: GroupRefs, types: dict, arg_type: str | None) -> tuple[list, exp.Expr]:
        """(new value and state columns, named like the stored ones; predicate: the group must
        be rescanned instead). `types` maps stored column names to their Spark types."""
        return [alias(g.stored(""), g.name)], exp.true()

    def may_rescan(self, agg: AggCall, arg_type: str | None) -> bool:
        """Can a group of this algebraic aggregate need a rescan (for these argument types)?"""
        return False

    def needs_unit_weights(self, agg: AggCall, arg_type: str | None) -> bool:
        """Must the delta rows reach it with weights of ±1 (x * w would lose digits)?"""
        return False


_STRATEGIES: dict[str, AggregateStrategy] = {}
_KIND_OF_CALL: dict[type[exp.Expr], str] = {}
_RESCAN = AggregateStrategy()


def strategy_for(agg: AggCall) -> AggregateStrategy:
    return _STRATEGIES.get(agg.kind, _RESCAN)


def algebraic_kind(call: exp.Expr) -> str | None:
    """The kind of a (non-COUNT) aggregate call some strategy maintains from its state; None:
    the group rescan."""
    return _KIND_OF_CALL.get(type(call))


class CountStrategy(AggregateStrategy):
    """COUNT(*) and COUNT(x): new = old + Σw (of the non-NULL x)."""

    kinds = ("count_star", "count")

    def delta_exprs(self, agg: AggCall, name: str, arg_type: str | None) -> list[exp.Expr]:
        if agg.kind == "count_star":
            return [alias(exp.Sum(this=col(WEIGHT)), f"{name}_d")]
        return [alias(_nonnull_weight(_arg(agg)), f"{name}_d")]

    def new_state(self, agg: AggCall, g: GroupRefs, types: dict, arg_type: str | None) -> tuple[list, exp.Expr]:
        return [alias(_plus(_coalesce0(g.stored()), _coalesce0(g.delta("_d"))), g.name)], exp.false()


class _ExactSums(AggregateStrategy):
    """Families that keep running sums of x (exact in DECIMAL where Spark's types allow)."""

    def needs_unit_weights(self, agg: AggCall, arg_type: str | None) -> bool:
        return not exact_times_weight(value_type(agg, arg_type))

    def _wide_sum(self, agg: AggCall, arg_type: str | None) -> bool:
        dec = _decimal(value_type(agg, arg_type))
        # A stored DECIMAL(38, s > 6) sum can hold values beyond DECIMAL(37, s) (_exact_plus).
        return dec is not None and (agg.kind in VAR_KINDS or min(38, dec[0] + 10) == 38) and dec[1] > 6

    def may_rescan(self, agg: AggCall, arg_type: str | None) -> bool:
        return self._wide_sum(agg, arg_type)

    def delta_exprs(self, agg: AggCall, name: str, arg_type: str | None) -> list[exp.Expr]:
        return [
            alias(exp.Sum(this=_weighted(_arg(agg), arg_type)), f"{name}_ds"),
            alias(_nonnull_weight(_arg(agg)), f"{name}_dnn"),
        ]

    def _total(self, g: GroupRefs, stored_sum: str, types: dict) -> tuple[exp.Expr, exp.Expr, exp.Expr, str | None]:
        """(non-NULL count, new sum — NULL when that count is 0 —, inexact predicate, sum type)."""
        nn = _plus(_coalesce0(g.stored("_nn")), _coalesce0(g.delta("_dnn")))
        has = exp.GT(this=nn.copy(), expression=exp.Literal.number(0))
        sum_type = types.get(f"{g.name}{stored_sum}")
        added, inexact = _exact_plus(_coalesce0(g.stored(stored_sum)), _coalesce0(g.delta("_ds")), sum_type)
        return nn, _case(has, added), inexact, sum_type


class SumStrategy(_ExactSums):
    """SUM(x): the value and the non-NULL count (the sum is NULL again when it drops to 0)."""

    kinds = ("sum",)
    calls = {exp.Sum: "sum"}
    aux = ("nn",)

    def state_exprs(self, agg: AggCall, name: str, arg_type: str | None) -> list[exp.Expr]:
        return [alias(agg.expr.copy(), name), alias(exp.Count(this=_arg(agg).copy()), f"{name}_nn")]

    def new_state(self, agg: AggCall, g: GroupRefs, types: dict, arg_type: str | None) -> tuple[list, exp.Expr]:
        nn, total, inexact, _ = self._total(g, "", types)
        return [alias(total, g.name), alias(nn, f"{g.name}_nn")], inexact


class AvgStrategy(_ExactSums):
    """AVG(x): Σx and the non-NULL count, the value their quotient as Spark's AVG computes it."""

    kinds = ("avg",)
    calls = {exp.Avg: "avg"}
    aux = ("sum", "nn")

    def state_exprs(self, agg: AggCall, name: str, arg_type: str | None) -> list[exp.Expr]:
        return [
            alias(agg.expr.copy(), name),
            alias(exp.Sum(this=_arg(agg).copy()), f"{name}_sum"),
            alias(exp.Count(this=_arg(agg).copy()), f"{name}_nn"),
        ]

    def may_rescan(self, agg: AggCall, arg_type: str | None) -> bool:
        return self._wide_sum(agg, arg_type) or not avg_division_exact(arg_type)

    def new_state(self, agg: AggCall, g: GroupRefs, types: dict, arg_type: str | None) -> tuple[list, exp.Expr]:
        nn, total, rescan, sum_type = self._total(g, "_sum", types)
        has = exp.GT(this=nn.copy(), expression=exp.Literal.number(0))
        sum_type = sum_type or "double"
        numerator: exp.Expr = exp.Cast(this=total.copy(), to=exp.DataType.build(sum_type))
        if sum_type.startswith("decimal"):
            denominator: exp.Expr = exp.Cast(this=nn.copy(), to=exp.DataType.build("decimal(20,0)"))
        else:
            numerator, denominator = _double(numerator), _double(nn)
        value: exp.Expr = _case(has, exp.Div(this=numerator, expression=denominator))
        if not avg_division_exact(arg_type):
            rescan = exp.true()
        return [alias(value, g.name), alias(total, f"{g.name}_sum"), alias(nn, f"{g.name}_nn")], rescan


class VarianceStrategy(_ExactSums):
    """VAR_POP/VAR_SAMP/STDDEV_POP/STDDEV_SAMP: count, Σx and Σx² (moment_type); over DOUBLE a
    group with deleted values is rescanned (Σx² − (Σx)²/n cancels when a dominant value leaves)."""

    kinds = VAR_KINDS
    calls = {
        exp.Stddev: "stddev_samp",
        exp.StddevSamp: "stddev_samp",
        exp.StddevPop: "stddev_pop",
        exp.Variance: "var_samp",
        exp.VariancePop: "var_pop",
    }
    aux = ("nn", "s", "q")

    def state_exprs(self, agg: AggCall, name: str, arg_type: str | None) -> list[exp.Expr]:
        x = _as(_arg(agg), moment_type(arg_type))
        return [
            alias(agg.expr.copy(), name),
            alias(exp.Count(this=_arg(agg).copy()), f"{name}_nn"),
            alias(exp.Sum(this=x), f"{name}_s"),
            alias(exp.Sum(this=exp.Mul(this=x.copy(), expression=x.copy())), f"{name}_q"),
        ]

    def may_rescan(self, agg: AggCall, arg_type: str | None) -> bool:
        return self._wide_sum(agg, arg_type) or double_variance(agg, arg_type)

    def delta_exprs(self, agg: AggCall, name: str, arg_type: str | None) -> list[exp.Expr]:
        w = col(WEIGHT)
        mt = moment_type(arg_type)
        x = _as(_arg(agg), mt)
        deleted = exp.and_(
            exp.LT(this=w.copy(), expression=exp.Literal.number(0)),
            exp.Not(this=exp.Is(this=_arg(agg).copy(), expression=exp.Null())),
        )
        return [
            alias(_nonnull_weight(_arg(agg)), f"{name}_dnn"),
            alias(exp.Sum(this=_weighted(x, mt)), f"{name}_ds"),
            alias(exp.Sum(this=_weighted(exp.Mul(this=x.copy(), expression=x.copy()), mt)), f"{name}_dq"),
            alias(exp.Max(this=_case(deleted, exp.Literal.number(1), exp.Literal.number(0))), f"{name}_ddel"),
        ]

    def new_state(self, agg: AggCall, g: GroupRefs, types: dict, arg_type: str | None) -> tuple[list, exp.Expr]:
        name = g.name
        nn = _plus(_coalesce0(g.stored("_nn")), _coalesce0(g.delta("_dnn")))
        s_type, q_type = types.get(f"{name}_s"), types.get(f"{name}_q")
        s, s_inexact = _exact_plus(_coalesce0(g.stored("_s")), _coalesce0(g.delta("_ds")), s_type)
        q, q_inexact = _exact_plus(_coalesce0(g.stored("_q")), _coalesce0(g.delta("_dq")), q_type)
        exact = (s_type or "double").startswith("decimal")
        rescan = (
            exp.or_(s_inexact, q_inexact)
            if exact
            else exp.EQ(this=_coalesce0(g.delta("_ddel")), expression=exp.Literal.number(1))
        )
        return [
            alias(_variance(agg.kind, nn, s, q, exact), name),
            alias(nn, f"{name}_nn"),
            alias(s, f"{name}_s"),
            alias(q, f"{name}_q"),
        ], rescan


class ExtremumStrategy(AggregateStrategy):
    """MIN / MAX (semi-algebraic): LEAST / GREATEST with the inserted values; the group is
    rescanned only when a deleted value reaches the stored extremum.

    Inserted and deleted are counted per value (its net weight in the group's delta): an update
    that keeps the argument's value (a row's other columns changed) deletes and inserts it
    again, which neither lowers nor raises the extremum, so it does not rescan the group.
    Values Spark's grouping takes as one (-0.0 and 0.0, strings equal under a collation) net as
    one: an update from one to the other keeps the stored spelling, where a rebuild shows the
    new one; both compare equal."""

    kinds = ("min", "max")
    calls = {exp.Min: "min", exp.Max: "max"}

    def row_exprs(self, agg: AggCall, name: str, keys: list[exp.Expr]) -> list[exp.Expr]:
        partition = [*(k.copy() for k in keys), _arg(agg).copy()]
        return [alias(exp.Window(this=exp.Sum(this=col(WEIGHT)), partition_by=partition), f"{name}_net")]

    def delta_exprs(self, agg: AggCall, name: str, arg_type: str | None) -> list[exp.Expr]:
        net = col(f"{name}_net")
        fn = exp.Min if agg.kind == "min" else exp.Max
        pos = exp.GT(this=net.copy(), expression=exp.Literal.number(0))
        neg = exp.LT(this=net.copy(), expression=exp.Literal.number(0))
        return [
            alias(fn(this=_case(pos, _arg(agg).copy())), f"{name}_ins"),
            alias(fn(this=_case(neg, _arg(agg).copy())), f"{name}_del"),
        ]

    def new_state(self, agg: AggCall, g: GroupRefs, types: dict, arg_type: str | None) -> tuple[list, exp.Expr]:
        pick = exp.Least if agg.kind == "min" else exp.Greatest
        reaches = exp.LTE if agg.kind == "min" else exp.GTE
        value = pick(this=g.stored(""), expressions=[g.delta("_ins")])
        # A value the delta removes (net, per value) at or beyond the candidate may have been
        # the old extremum: only the group's rows can tell.
        rescan = exp.and_(
            exp.Not(this=exp.Is(this=g.delta("_del"), expression=exp.Null())),
            exp.Not(this=exp.Is(this=value.copy(), expression=exp.Null())),
            reaches(this=g.delta("_del"), expression=value.copy()),
        )
        return [alias(value, g.name)], rescan


# -- the calls the stored result makes (dvm/stored_result.py) ----------------------------------


def aux_suffixes(agg: AggCall) -> list[str]:
    return list(strategy_for(agg).aux)


def state_exprs(agg: AggCall, name: str, arg_type: str | None = None) -> list[exp.Expr]:
    return strategy_for(agg).state_exprs(agg, name, arg_type)


def row_exprs(agg: AggCall, name: str, keys: list[exp.Expr]) -> list[exp.Expr]:
    return strategy_for(agg).row_exprs(agg, name, keys)


def delta_exprs(agg: AggCall, name: str, arg_type: str | None = None) -> list[exp.Expr]:
    return strategy_for(agg).delta_exprs(agg, name, arg_type)


def new_state(
    agg: AggCall, name: str, old: str, d: str, types: dict, arg_type: str | None = None
) -> tuple[list[exp.Expr], exp.Expr]:
    """(new state columns named like the stored ones, rescan-needed predicate) for one group;
    `old` / `d` are the table aliases of the stored row and of the group's delta."""
    return strategy_for(agg).new_state(agg, GroupRefs(name, old, d), types, arg_type)


def may_rescan(agg: AggCall, arg_type: str | None) -> bool:
    return strategy_for(agg).may_rescan(agg, arg_type)


def needs_unit_weights(agg: AggCall, arg_type: str | None) -> bool:
    return strategy_for(agg).needs_unit_weights(agg, arg_type)
