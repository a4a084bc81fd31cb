"""Reading an operator's input for the keys a change touches, and its old rows from its new ones.

A key-restricted recompute (outer / semi / anti joins, set operations, a window's partitions, an
aggregate or DISTINCT below the root) reads its input at both versions, restricted to the keys
in the change. For a plain source (or filters and projections of one) the old rows need no
second read: they are the new rows minus the change (`old = new − Δ`), since a source's change
rows are its rows, value for value, and the same expressions over the same row give the same
values. The new rows for the keys are computed once (`ctx.materialize`), so a large source is
scanned once instead of twice.
"""

from __future__ import annotations

from sqlglot import exp

from python_helpers.dvm.operators import base
from python_helpers.dvm.operators import scan as scan_rules
from python_helpers.dvm.sqlgen import (
    Context,
    alias,
    col,
    consolidate,
    known_empty,
    repeat_rows,
    select_from,
    sub,
    union_all_of,
    weight,
)
from python_helpers.dvm.tree import WEIGHT, Aggregate, Filter, Node, Project, Scan

KEY = "__dvm_rk"  # the columns of a relation of keys: __dvm_rk0, __dvm_rk1, ...

# raise_error's text when a source's change names rows its new version lacks (the old rows
# would have a negative count): the refresh stops rather than publish wrong rows.
OLD_ROWS_BROKEN = "the change of a source names rows its new version does not hold"


def keys_of(ctx: Context, delta: exp.Expr, exprs: list) -> exp.Select:
    """The keys a delta names: `exprs` over its rows, as columns KEY0, KEY1, ..."""
    return select_from([alias(e.copy(), f"{KEY}{i}") for i, e in enumerate(exprs)], sub(delta.copy(), ctx.alias("dk")))


def restrict(ctx: Context, query, exprs: list, keys) -> exp.Select:
    """Rows of `query` whose key (null-safe) is among `keys` (columns KEY0, KEY1, ...)."""
    q, k = ctx.alias("q"), ctx.alias("k")
    on = exp.and_(*[exp.NullSafeEQ(this=e.copy(), expression=col(f"{KEY}{i}", k)) for i, e in enumerate(exprs)])
    step = select_from([exp.Star()], sub(query, q))
    if ctx.small_delta:
        step.set("hint", exp.Hint(expressions=[exp.Anonymous(this="BROADCAST", expressions=[exp.to_identifier(k)])]))
    return step.join(sub(keys.copy(), k), on=on, join_type="LEFT SEMI", copy=False)


def scan_below(node: Node, weighted: bool = False):
    """The source of a plain source under nothing but filters and projections, else None; with
    `weighted`, a bag upstream's stored rows with their counts count as one too."""
    while isinstance(node, (Filter, Project)):
        node = node.child
    return node if isinstance(node, Scan) and (weighted or node.weight_column is None) else None


def keyed_read(
    ctx: Context, child: Node, version: str, column: str, changed: Node, changed_column: str, more: tuple = ()
):
    """`child` (a plain source under filters and projections) at `version`, its source read only
    from what can hold a value `changed`'s source change has in `changed_column` (or one of the
    `more` (node, column) pairs' changes has) where `child` has it in `column`
    (ctx.keyed_snapshot: files by their statistics, rows by a key list). A superset of the rows
    whose `column` meets such a value, none with a NULL there; None where that cannot be done.
    A changed node may be a bag upstream: its change's keys are keys whatever their counts."""
    scan = scan_below(child)
    if scan is None or ctx.keyed_snapshot is None:
        return None
    source = base.copied_from(child, column, scan.relation)
    changes = []
    for node, name in ((changed, changed_column), *more):
        changed_scan = scan_below(node, weighted=True)
        changed_source = None if changed_scan is None else base.copied_from(node, name, changed_scan.relation)
        if changed_scan is None or changed_source is None:
            return None
        changes.append((changed_scan.relation, changed_source))
    if source is None:
        return None
    read = scan_rules.keyed_source_plain(scan, ctx, version, source, *changes[0], more=tuple(changes[1:]))
    return None if read is None else _Substituted(ctx, scan, read).plain(child, version)


def read_for_keys(ctx: Context, child: Node, version: str, exprs: list, keys: exp.Expr):
    """`child` at `version`, its plain source read only where the columns the key `exprs` copy
    can meet a row of `keys` (columns KEY0, KEY1, ...: a computed relation of few rows), by the
    engine (ctx.rows_for_keys); a superset of the rows restrict() keeps, which the caller
    restricts exactly. `child` is the source under filters, projections and groupings whose keys
    copy those columns (a group is kept or dropped whole by its key, so its input may be cut the
    same way). None where the engine cannot, or there is no such source."""
    if ctx.rows_for_keys is None or known_empty(keys):
        return None
    found = _keyed_source(child, [e.name if isinstance(e, exp.Column) else None for e in exprs])
    if found is None:
        return None
    scan, sources = found
    pairs = [(source, f"{KEY}{i}") for i, source in enumerate(sources) if source is not None]
    if not pairs:
        return None
    relation = ctx.rows_for_keys(scan.relation, version, pairs, keys)
    if relation is None:
        return None
    return _Substituted(ctx, scan, scan_rules.source_plain(scan, relation)).plain(child, version)


def keys_below_grouping(ctx: Context, child: Node, exprs: list, delta_of):
    """Keys (columns KEY0, KEY1, ...) holding every key `exprs` (columns of `child`) of
    `child`'s change, taken from the change of the row-wise source below a grouping: where
    `child` is, through filters and projections, a GROUP BY whose group keys the `exprs` copy,
    over a plain source under filters and projections. A group's rows change only where its
    input's rows of that key changed, so those keys are a superset of the exact ones (the
    recompute restricted to them is exact), read from the source's change without computing
    the grouping's change. None where `child` is not such a shape or its source did not change."""
    if not exprs:
        return None
    names = _column_names(exprs)
    node = child
    while not isinstance(node, Aggregate):
        if any(n is None for n in names):
            return None
        if isinstance(node, Filter):
            node = node.child
        elif isinstance(node, Project):
            names = _projected(node, names)
            node = node.child
        else:
            return None
    group: dict = dict(zip(node.key_names, node.keys))
    if any(n not in group for n in names) or not row_wise_source(node.child):
        return None
    change = delta_of(node.child)
    if change is None:
        return None
    return keys_of(ctx, change, [group[n] for n in names])


def _keyed_source(node: Node, names: list):
    """The plain source below `node` through filters, projections and groupings, with the
    source column each of `names` (columns of `node`) copies (None where it copies none)."""
    names = list(names)
    while not isinstance(node, Scan):
        if isinstance(node, Filter):
            node = node.child
            continue
        if isinstance(node, Project):
            names = _projected(node, names)
        elif isinstance(node, Aggregate) and node.keys:
            group = dict(zip(node.key_names, node.keys))
            names = _column_names([group.get(n) if n is not None else None for n in names])
        else:
            return None
        node = node.child
    if node.weight_column is not None:
        return None
    return node, [node.source_columns[node.columns.index(n)] if n in node.columns else None for n in names]


def _projected(node: Project, names: list) -> list:
    """The child column each of `names` (columns of `node`) copies, None where it copies none."""
    return _column_names([node.exprs[node.columns.index(n)] if n in node.columns else None for n in names])


def _column_names(exprs: list) -> list:
    return [e.name if isinstance(e, exp.Column) else None for e in exprs]


class _Substituted:
    """A Walk that renders one node as given SQL and every other node by its own rules."""

    def __init__(self, ctx: Context, node: Node, rendered: exp.Expr):
        self.ctx, self.node, self.rendered = ctx, node, rendered

    def plain(self, node: Node, version: str) -> exp.Expr:
        if node is self.node:
            return self.rendered.copy()
        return base.operator_for(node).plain(node, self.ctx, version, self)

    def delta(self, node: Node):
        raise TypeError("a substituted read renders rows, not changes")

    def changed(self, node: Node) -> bool:
        return False


def from_change(ctx: Context, child: Node, change) -> bool:
    """Read `child` at the old version as its new rows minus its change? For a plain source,
    or filters and projections of one, with a small change, when the engine can compute the new
    rows once: computed inputs (joins, aggregates) could round differently in their delta than
    in their plain rows, and a bag upstream's rows repeat."""
    return change is not None and ctx.small_delta and ctx.materialize is not None and row_wise_source(child)


def row_wise_source(node: Node) -> bool:
    """A plain source under nothing but filters and projections."""
    return scan_below(node) is not None


def minus_change(ctx: Context, columns: list, new_rows: exp.Expr, change: exp.Expr) -> exp.Select:
    """The rows at the old version: the new rows (each once) minus the change's weights, counted
    per distinct row and repeated by the count."""
    plus = select_from(
        [col(c) for c in columns] + [alias(exp.Literal.number(1), WEIGHT)], sub(new_rows.copy(), ctx.alias("on"))
    )
    minus = select_from(
        [col(c) for c in columns] + [alias(exp.Neg(this=weight()), WEIGHT)], sub(change.copy(), ctx.alias("oc"))
    )
    counted = consolidate(ctx, union_all_of([plus, minus]), columns)
    broken = exp.Anonymous(this="raise_error", expressions=[exp.Literal.string(OLD_ROWS_BROKEN)])
    count = exp.If(this=exp.LT(this=weight(), expression=exp.Literal.number(0)), true=broken, false=weight())
    checked = select_from([col(c) for c in columns] + [alias(count, "__dvm_m")], sub(counted, ctx.alias("om")))
    outer = select_from([col(c) for c in columns] + [col("__dvm_m")], sub(checked, ctx.alias("ok")))
    repeated = repeat_rows(outer, col("__dvm_m"), ctx.alias("rep"))
    return select_from([col(c) for c in columns], sub(repeated, ctx.alias("oo")))


def new_minus_old(ctx: Context, columns: list, at) -> exp.Select:
    """`at(version)` (an operator over its restricted inputs) at new minus at old, consolidated."""
    sides = [
        select_from(
            [col(c) for c in columns] + [alias(exp.Literal.number(sign), WEIGHT)], sub(at(version), ctx.alias("v"))
        )
        for sign, version in ((1, "new"), (-1, "old"))
    ]
    return consolidate(ctx, union_all_of(sides), columns)
