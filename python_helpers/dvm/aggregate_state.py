"""Per-aggregate state kept in the stored result, and its algebraic / semi-algebraic update.

Each AggCall j keeps its value in `__dvm_agg_j` plus auxiliary columns:
  count, count(*)          value only (new = old + Σw)
  sum                      value, _nn (non-NULL count; the sum is NULL when _nn = 0)
  avg                      value, _sum, _nn (value = _sum / _nn, cast as Spark's AVG does)
  var_*/stddev_*           value, _nn, _s (Σx), _q (Σx²), as DOUBLE
  min / max                value; LEAST/GREATEST with inserted values, rescan of the group
                           only when a deleted value reaches the stored extremum
  other                    value; the group is re-aggregated from the new snapshot
"""

from __future__ import annotations

import re

from sqlglot import exp

from python_helpers.dvm.sqlgen import alias, col
from python_helpers.dvm.tree import WEIGHT, AggCall

VAR_KINDS = ("var_pop", "var_samp", "stddev_pop", "stddev_samp")


def aux_suffixes(agg: AggCall) -> list[str]:
    if agg.kind == "sum":
        return ["nn"]
    if agg.kind == "avg":
        return ["sum", "nn"]
    if agg.kind in VAR_KINDS:
        return ["nn", "s", "q"]
    return []


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


def needs_unit_weights(agg: AggCall, arg_type: str | None) -> bool:
    """Must the delta rows reach this aggregate with weights of ±1 (each row repeated |w|
    times)? Only where x * w would lose digits: DECIMALs of more than 17 digits."""
    if agg.kind in ("sum", "avg") or agg.kind in VAR_KINDS:
        return not exact_times_weight(value_type(agg, arg_type))
    return False


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


def may_rescan(agg: AggCall, arg_type: str | None) -> bool:
    """Can a group of this algebraic aggregate need a rescan (beyond non-algebraic ones)?"""
    if agg.kind in ("sum", "avg") or agg.kind in VAR_KINDS:
        dec = _decimal(value_type(agg, arg_type))
        # A stored DECIMAL(38, s > 6) sum can hold values beyond DECIMAL(37, s) (_exact_plus).
        wide_sum = dec is not None and (agg.kind in VAR_KINDS or min(38, dec[0] + 10) == 38) and dec[1] > 6
        return wide_sum or double_variance(agg, arg_type) or (agg.kind == "avg" and not avg_division_exact(arg_type))
    return False


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


def state_exprs(agg: AggCall, name: str, arg_type: str | None = None) -> list[exp.Expr]:
    """Columns computing the state from plain rows (full build, group rescan)."""
    out = [alias(agg.expr.copy(), name)]
    if agg.kind == "sum":
        out.append(alias(exp.Count(this=_arg(agg).copy()), f"{name}_nn"))
    elif agg.kind == "avg":
        out += [
            alias(exp.Sum(this=_arg(agg).copy()), f"{name}_sum"),
            alias(exp.Count(this=_arg(agg).copy()), f"{name}_nn"),
        ]
    elif agg.kind in VAR_KINDS:
        x = _as(_arg(agg), moment_type(arg_type))
        out += [
            alias(exp.Count(this=_arg(agg).copy()), f"{name}_nn"),
            alias(exp.Sum(this=x), f"{name}_s"),
            alias(exp.Sum(this=exp.Mul(this=x.copy(), expression=x.copy())), f"{name}_q"),
        ]
    return out


def delta_exprs(agg: AggCall, name: str, arg_type: str | None = None) -> list[exp.Expr]:
    """Per-group aggregates over the weighted delta (consumed by new_state)."""
    w = col(WEIGHT)
    if agg.kind == "count_star":
        return [alias(exp.Sum(this=w), f"{name}_d")]
    if agg.kind == "count":
        return [alias(_nonnull_weight(_arg(agg)), f"{name}_d")]
    if agg.kind in ("sum", "avg"):
        return [
            alias(exp.Sum(this=_weighted(_arg(agg), arg_type)), f"{name}_ds"),
            alias(_nonnull_weight(_arg(agg)), f"{name}_dnn"),
        ]
    if agg.kind in VAR_KINDS:
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
    if agg.kind in ("min", "max"):
        fn = exp.Min if agg.kind == "min" else exp.Max
        pos = exp.GT(this=w.copy(), expression=exp.Literal.number(0))
        neg = exp.LT(this=w.copy(), expression=exp.Literal.number(0))
        return [
            alias(fn(this=_case(pos, _arg(agg).copy())), f"{name}_ins"),
            alias(fn(this=_case(neg, _arg(agg).copy())), f"{name}_del"),
        ]
    return []


def new_state(
    agg: AggCall, name: str, old: str, d: str, types: dict, arg_type: str | None = None
) -> tuple[list[exp.Expr], exp.Expr]:
    """(new state columns named like the stored ones, rescan-needed predicate) for one group.

    `old` / `d` are the table aliases of the stored row (NULL if the group is new) and of the
    group's delta; `types` maps stored column names to their Spark types.
    """
    zero = exp.Literal.number(0)
    o = lambda suffix="": col(f"{name}{suffix}", old)  # noqa: E731
    dd = lambda suffix: col(f"{name}{suffix}", d)  # noqa: E731
    coalesce0 = lambda e: exp.Coalesce(this=e, expressions=[zero.copy()])  # noqa: E731
    plus = lambda a, b: exp.Add(this=a, expression=b)  # noqa: E731
    no_rescan = exp.false()
    if agg.kind in ("count_star", "count"):
        return [alias(plus(coalesce0(o()), coalesce0(dd("_d"))), name)], no_rescan
    if agg.kind in ("sum", "avg"):
        nn = plus(coalesce0(o("_nn")), coalesce0(dd("_dnn")))
        has = exp.GT(this=nn.copy(), expression=zero.copy())
        total_col = o("") if agg.kind == "sum" else o("_sum")
        sum_type = types.get(name if agg.kind == "sum" else f"{name}_sum")
        added, inexact = _exact_plus(coalesce0(total_col), coalesce0(dd("_ds")), sum_type)
        total = _case(has, added)
        rescan = inexact
        if agg.kind == "sum":
            return [alias(total, name), alias(nn, f"{name}_nn")], rescan
        sum_type = sum_type or "double"
        numerator: exp.Expr = exp.Cast(this=total.copy(), to=exp.DataType.build(sum_type))
        if sum_type.startswith("decimal"):
            denominator: exp.Expr = exp.Cast(this=nn.copy(), to=exp.DataType.build("decimal(20,0)"))
        else:
            numerator, denominator = _double(numerator), _double(nn)
        value: exp.Expr = _case(has.copy(), exp.Div(this=numerator, expression=denominator))
        if not avg_division_exact(arg_type):
            rescan = exp.true()
        return [alias(value, name), alias(total, f"{name}_sum"), alias(nn, f"{name}_nn")], rescan
    if agg.kind in VAR_KINDS:
        nn = plus(coalesce0(o("_nn")), coalesce0(dd("_dnn")))
        s_type, q_type = types.get(f"{name}_s"), types.get(f"{name}_q")
        s, s_inexact = _exact_plus(coalesce0(o("_s")), coalesce0(dd("_ds")), s_type)
        q, q_inexact = _exact_plus(coalesce0(o("_q")), coalesce0(dd("_dq")), q_type)
        exact = (s_type or "double").startswith("decimal")
        rescan = (
            exp.or_(s_inexact, q_inexact)
            if exact
            else exp.EQ(this=coalesce0(dd("_ddel")), expression=exp.Literal.number(1))
        )
        return [
            alias(_variance(agg.kind, nn, s, q, exact), name),
            alias(nn, f"{name}_nn"),
            alias(s, f"{name}_s"),
            alias(q, f"{name}_q"),
        ], rescan
    if agg.kind in ("min", "max"):
        pick = exp.Least if agg.kind == "min" else exp.Greatest
        reaches = exp.LTE if agg.kind == "min" else exp.GTE
        value = pick(this=o(""), expressions=[dd("_ins")])
        # A deleted value at or beyond the candidate (the old extremum or an inserted value: an
        # unconsolidated delta can insert and delete the same value) may have been it.
        rescan = exp.and_(
            exp.Not(this=exp.Is(this=dd("_del"), expression=exp.Null())),
            exp.Not(this=exp.Is(this=value.copy(), expression=exp.Null())),
            reaches(this=dd("_del"), expression=value.copy()),
        )
        return [alias(value, name)], rescan
    return [alias(o(""), name)], exp.true()


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
