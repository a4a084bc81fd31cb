"""Outer joins, semi / anti joins and INTERSECT / EXCEPT: two-input operators keyed by their
equality conditions.

Each of these has a *key* on both inputs (the expressions of the condition's equalities that
pair a left column with a right one; for a set operation, every column) such that the output
rows of one key value depend only on the input rows with that key value. So

    Δ(L op R) = op(L_new ⋉ K, R_new ⋉ K) − op(L_old ⋉ K, R_old ⋉ K),   K ⊇ keys(ΔL) ∪ keys(ΔR)

consolidated: the keys no change touched are not read past the restriction (delta key
restriction), and a NULL-padded row that appears or disappears as a key's first match comes
or its last match goes is exactly the difference of the two recomputes. The restriction
matches keys null-safely, so rows with a NULL key are restricted like any other.

A LEFT outer, semi or anti join is linear in its left input (each left row's output depends
on that row and the right side only). When only the left input changed, Δ = op(ΔL, R), which
needs no restriction to be exact; with a small ΔL read from a change, R is still read only
where it can hold ΔL's keys (_matchable: the engine's keyed read, a broadcast semi join with
the keys, or both), as Spark hashes only a semi join's right side. When both did,

    Δ = op(ΔL, R_new) + op(L_old ⋉ K, R_new ⋉ K) − op(L_old ⋉ K, R_old ⋉ K),   K ⊇ keys(ΔR)

(used when ΔL is itself computed by joins), so ΔL is read once and never to find keys: with
these joins nested (sublinks used as values become one left join each over the same rows),
keys taken from ΔL would make each level compute the level below again.

Any K holding the changed keys gives the exact Δ. A right input that is a grouping by the key
over a source (the count per key of a sublink used as a value) takes its keys from that
source's change (restricted_reads.keys_below_grouping), a superset, without computing the
grouping's change.

Without an equality between the two sides there is no key: the operator is recomputed at both
versions in full (correct, and as costly as a rebuild of that operator; documented).
"""

from __future__ import annotations

from typing import Optional, Union

from sqlglot import exp

from python_helpers.dvm.operators import restricted_reads
from python_helpers.dvm.operators.base import Operator, Walk, copied_from
from python_helpers.dvm.operators.restricted_reads import keys_of, new_minus_old, restrict
from python_helpers.dvm.sqlgen import (
    Context,
    alias,
    col,
    consolidate,
    reads_keyed_rows,
    select_from,
    sub,
    union_all,
    union_all_of,
    weight,
)
from python_helpers.dvm.tree import WEIGHT, Node, OuterJoin, Scan, SemiJoin, SetOp, Window, walk
from python_helpers.sql.predicates import conjuncts

# The operators this module differentiates by recomputing them for the changed keys.
KeyRestricted = Union[OuterJoin, SemiJoin, SetOp]


def plain(node: KeyRestricted, ctx: Context, left_sql, right_sql, weighted: bool = False) -> exp.Expr:
    """The operator over two rendered inputs; `weighted` carries the left input's weight."""
    if isinstance(node, SetOp):
        return _set_op(node, ctx, left_sql, right_sql)
    la, ra = ctx.alias("l"), ctx.alias("r")
    if isinstance(node, SemiJoin):
        cols: list[exp.Expr] = [col(c, la) for c in node.columns]
        join_type = "LEFT ANTI" if node.anti else "LEFT SEMI"
    else:
        cols = [col(c) for c in node.columns]
        join_type = "FULL OUTER" if node.kind == "full" else "LEFT OUTER"
    if weighted:
        cols.append(alias(weight(la), WEIGHT))
    on = node.condition.copy() if node.condition is not None else exp.true()
    return select_from(cols, sub(left_sql, la)).join(sub(right_sql, ra), on=on, join_type=join_type, copy=False)


def _set_op(node: SetOp, ctx: Context, left_sql, right_sql) -> exp.Expr:
    left = select_from([col(c) for c in node.columns], sub(left_sql, ctx.alias("sl")))
    right = select_from(
        [alias(col(c), n) for c, n in zip(node.right.columns, node.columns)], sub(right_sql, ctx.alias("sr"))
    )
    cls = exp.Intersect if node.op == "intersect" else exp.Except
    return cls(this=left, expression=right, distinct=not node.all)


def key_pairs(node: KeyRestricted, null_safe: bool = True) -> list[tuple[exp.Expr, exp.Expr]]:
    """(left expression, right expression) pairs the operator matches on, [] when it has none;
    with `null_safe` False, only the `=` pairs (a NULL on either side matches nothing)."""
    if isinstance(node, SetOp):
        return [(col(a), col(b)) for a, b in zip(node.left.columns, node.right.columns)] if null_safe else []
    left, right = set(node.left.columns), set(node.right.columns)
    pairs = []
    for c in conjuncts(node.condition):
        if not isinstance(c, (exp.EQ, exp.NullSafeEQ)) or (isinstance(c, exp.NullSafeEQ) and not null_safe):
            continue
        a, b = c.this, c.expression
        ca = {x.name for x in a.find_all(exp.Column)}
        cb = {x.name for x in b.find_all(exp.Column)}
        if ca and cb and ca <= left and cb <= right:
            pairs.append((a, b))
        elif ca and cb and ca <= right and cb <= left:
            pairs.append((b, a))
    return pairs


def strict_keys(node: KeyRestricted) -> tuple[list, list]:
    """(left, right) expressions of the `=` pairs of a LEFT outer, semi or anti join: a row with
    a NULL in one of them matches no row of the other input, so its output depends on itself
    alone (padded, kept or dropped). ([], []) for a full join or a set operation, where NULLs
    match or both sides pad."""
    if isinstance(node, SetOp) or (isinstance(node, OuterJoin) and node.kind != "left"):
        return [], []
    pairs = key_pairs(node, null_safe=False)
    return [a for a, _ in pairs], [b for _, b in pairs]


def _not_null(exprs: list) -> exp.Expr:
    return exp.and_(*[exp.Not(this=exp.Is(this=e.copy(), expression=exp.Null())) for e in exprs])


def matching(ctx: Context, rows: exp.Expr, exprs: list) -> exp.Expr:
    """The rows of `rows` that can meet a row by the `=` of `exprs`: none of them NULL."""
    if not exprs:
        return rows
    return select_from([exp.Star()], sub(rows.copy(), ctx.alias("km"))).where(_not_null(exprs), copy=False)


def _unmatched(node: KeyRestricted, ctx: Context, dl, exprs: list, right_of) -> Optional[exp.Expr]:
    """The output of the left change's rows that no right row can meet (a NULL in a strict key):
    op(ΔL_null, ∅), none for a semi join. These rows are left out of the changed keys, so the
    right input's rows with a NULL key are never read to recompute them. `right_of()`: a
    relation of the right input's columns the recompute reads anyway (∅ is it `WHERE FALSE`,
    which Spark never reads; a relation of its own would bind the source's files for nothing)."""
    if not exprs or (isinstance(node, SemiJoin) and not node.anti):
        return None
    rows = select_from([exp.Star()], sub(dl.copy(), ctx.alias("ku")))
    rows = rows.where(exp.or_(*[exp.Is(this=e.copy(), expression=exp.Null()) for e in exprs]), copy=False)
    nothing = select_from([exp.Star()], sub(right_of().copy(), ctx.alias("kn"))).where(exp.false())
    return plain(node, ctx, rows, nothing, weighted=True)


def delta(node: KeyRestricted, ctx: Context, delta_of, plain_of):
    """Δ of an OuterJoin, SemiJoin or SetOp; `delta_of(n)` / `plain_of(n, version)` render inputs."""
    dl = delta_of(node.left)
    # A right input grouped by the join keys (a sublink used as a value: a count per key) over a
    # source: its changed keys are read from the source's change, and its own change (a
    # grouping's, computed with a job of its own) is never computed: only its keys are used.
    right_keys = restricted_reads.keys_below_grouping(ctx, node.right, [b for _, b in key_pairs(node)], delta_of)
    dr = None if right_keys is not None else delta_of(node.right)
    if dl is None and dr is None and right_keys is None:
        return None
    linear = isinstance(node, SemiJoin) or (isinstance(node, OuterJoin) and node.kind == "left")
    if dr is None and right_keys is None and linear:
        return plain(node, ctx, dl, _matchable(node, ctx, dl, plain_of), weighted=True)
    if linear and _derived(dl):
        # Linear in its left input: Δ = ΔL op R_new + (L_old op R_new − L_old op R_old), the
        # second part recomputed for the keys of ΔR only. A ΔL computed by joins (outer joins
        # nested over sublinks, each a recompute of its own) is then read once, never to find
        # keys. A ΔL read from a change keeps the rule below: its keys are cheap, and it
        # reads the right input twice where this reads it three times.
        left_part = plain(node, ctx, dl, plain_of(node.right, "new"), weighted=True)
        right_part = _recomputed(node, ctx, None, dr, plain_of, left_version="old", right_keys=right_keys)
        return consolidate(ctx, union_all_of([left_part, right_part]), node.columns)
    return _recomputed(node, ctx, dl, dr, plain_of, right_keys=right_keys)


def _matchable(node: KeyRestricted, ctx: Context, dl, plain_of):
    """The right input of Δ = ΔL op R when ΔL is a small read of a change: R read only where it
    can hold one of the change's keys. Spark cannot build a semi, anti or left join's hash from
    its left side, so it would shuffle all of R to meet a few changed rows (TPC-H q04: 1,000
    changed orders against all of lineitem). Exact: a right row whose key no ΔL row holds
    matches none.

    Where an `=` of two columns ties R, a plain source, to the change: the engine's keyed read
    (files by their statistics; for a change of few keys, rows by a key list, which adds no
    job). Where R's rows are not kept by a key list and R reads a source too large for Spark to
    broadcast: R ⋉ keys(ΔL), with the keys broadcast (q04, warm: 0.9 s against 1.3 s); over the
    keyed read where there is one, since a change of scattered keys leaves most files to read
    and the semi join would shuffle all their rows. A small R Spark broadcasts itself: there
    the semi join's extra job made q20's delta slower (2.0 s against 1.5 s)."""
    pairs = key_pairs(node)
    if not (pairs and ctx.small_delta and not _derived(dl)):
        return plain_of(node.right, "old")
    keyed = _keyed_right(ctx, node)
    if keyed is not None and reads_keyed_rows(keyed):
        return keyed
    right = keyed if keyed is not None else plain_of(node.right, "old")
    if ctx.large_source is None or any(ctx.large_source(s.relation) for s in _scans(node.right)):
        # ΔL's rows with a NULL in an `=` key name no key: a NULL key would bring every right
        # row whose key is NULL, none of which can match.
        keys = keys_of(ctx, matching(ctx, dl, strict_keys(node)[0]), [a for a, _ in pairs])
        return restrict(ctx, right, [b for _, b in pairs], keys)
    return right


def _keyed_right(ctx: Context, node: KeyRestricted):
    """The right input of a LEFT, semi or anti join, read only where it can meet the keys of the
    source change below its left input, on an `=` of two columns (restricted_reads.keyed_read),
    or None. A keyed read drops rows whose key is NULL, which an `=` never matches."""
    for left, right in key_pairs(node, null_safe=False):
        if isinstance(left, exp.Column) and isinstance(right, exp.Column):
            read = restricted_reads.keyed_read(ctx, node.right, "old", right.name, node.left, left.name)
            if read is not None:
                return read
    return None


def _scans(node: Node) -> list:
    return [n for n in walk(node) if isinstance(n, Scan)]


def _recomputed(
    node: KeyRestricted, ctx: Context, dl, dr, plain_of, left_version: Optional[str] = None, right_keys=None
):
    """The operator at new minus at old over both inputs restricted to the keys of `dl` and
    `dr` (the whole inputs without a key). `left_version` holds the left input at one version
    in both (its change is accounted for elsewhere). `right_keys`, in place of `dr`: keys
    holding those of the right input's change (restricted_reads.keys_below_grouping)."""
    pairs = key_pairs(node)
    # The changes' rows with a NULL in an `=` key name no key (their output is their own,
    # `_unmatched`): a NULL among the keys would read every row with a NULL key, at both
    # versions, to recompute outputs that cannot change.
    strict = strict_keys(node)
    dl_keyed = None if dl is None else matching(ctx, dl, strict[0])
    dr_keyed = None if dr is None else matching(ctx, dr, strict[1])
    if right_keys is None:
        keys = _changed_keys(ctx, node, pairs, dl_keyed, dr_keyed) if pairs else None
    else:
        keys = _changed_keys(ctx, node, pairs, dl_keyed, right_keys=_strict_keys(ctx, node, right_keys))
    if keys is not None and ctx.materialize is not None and _computed(node, dl, dr):
        # The keys restrict both inputs at both versions: four reads. A delta computed below
        # (joins, nested restrictions, an aggregate's change) would be recomputed at each, and
        # nested operators of this kind multiply that by four per level; computed once, it is
        # a small relation. Keys read from a source's change stay inline (a cheap scan, which
        # the engine can list from the change it holds), those read below a grouping too.
        keys = ctx.materialize(keys)
    inputs = ((node.left, dl_keyed, [a for a, _ in pairs]), (node.right, dr_keyed, [b for _, b in pairs]))
    # A changed source input is read once for the changed keys, at the new version; its old
    # rows are those minus its change (one scan of a large source instead of two).
    reads: dict = {}
    if keys is not None:
        for i, (child, d, exprs) in enumerate(inputs):
            if d is not None and restricted_reads.from_change(ctx, child, d):
                rows = (
                    _keyed_new(ctx, node, i, strict, dl is not None, dr is not None or right_keys is not None)
                    or restricted_reads.read_for_keys(ctx, child, "new", exprs, keys)
                    or plain_of(child, "new")
                )
                new = ctx.materialize(restrict(ctx, rows, exprs, keys))  # type: ignore[misc]
                reads[(i, "new")] = new
                reads[(i, "old")] = restricted_reads.minus_change(ctx, child.columns, new, d)

    def at(version):
        rendered = []
        for i, (child, _, exprs) in enumerate(inputs):
            read_at = left_version if i == 0 and left_version is not None else version
            read = reads.get((i, read_at))
            if read is not None:
                rendered.append(read.copy())
            elif keys is not None:
                rows = restricted_reads.read_for_keys(ctx, child, read_at, exprs, keys) or plain_of(child, read_at)
                rendered.append(restrict(ctx, rows, exprs, keys))
            else:
                rendered.append(plain_of(child, read_at))
        return plain(node, ctx, *rendered)

    recomputed = new_minus_old(ctx, node.columns, at)
    unmatched = None
    if keys is not None and dl is not None:
        read = reads.get((1, "new"))

        def right_of():
            return read if read is not None else plain_of(node.right, "new")

        unmatched = _unmatched(node, ctx, dl, strict[0], right_of)
    # Disjoint outputs (a NULL strict key against none): no second consolidation.
    return recomputed if unmatched is None else union_all_of([recomputed, unmatched])


def _keyed_new(
    ctx: Context, node: KeyRestricted, side: int, strict: tuple, left_changed: bool, right_changed: bool
) -> Optional[exp.Expr]:
    """The changed input `side` (a plain source) at the new version, read only where it can hold
    a key of either input's change, on an `=` of two columns: the engine's keyed read (files by
    their statistics, rows by a key list), or None. A superset of its rows of the changed keys
    (the caller restricts it to them exactly): without it, the restriction is a semi join over
    a full scan of the source. Only `=` keys: the read drops NULL keys, which none of those
    keys holds (`strict`: strict_keys(node))."""
    child, other = (node.left, node.right) if side == 0 else (node.right, node.left)
    other_changed = right_changed if side == 0 else left_changed
    for left, right in zip(*strict):
        if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
            continue
        mine, theirs = (left.name, right.name) if side == 0 else (right.name, left.name)
        more = ((other, theirs),) if other_changed else ()
        read = restricted_reads.keyed_read(ctx, child, "new", mine, child, mine, more=more)
        if read is not None:
            return read
    return None


def _derived(*deltas) -> bool:
    """Is one of the input deltas computed by joins (more than a read of a change)?"""
    return any(d is not None and d.find(exp.Join) is not None for d in deltas)


def _computed(node: KeyRestricted, dl, dr) -> bool:
    """Is one of the input deltas computed (by joins, nested restrictions, an aggregate) rather
    than read from a change? A row-wise source's delta is a read of its change, never a join,
    so this holds wherever `_derived` does."""
    return any(
        d is not None and restricted_reads.scan_below(child, weighted=True) is None
        for d, child in ((dl, node.left), (dr, node.right))
    )


def _changed_keys(
    ctx: Context, node: KeyRestricted, pairs, dl, dr=None, right_keys: Optional[exp.Expr] = None
) -> Optional[exp.Expr]:
    """The keys of the input deltas. The delta of an input other than a source is consolidated
    first: rows that cancel (an aggregate whose value came back to what it was, a flag whose
    count moved without reaching 0) name no key, so nothing is recomputed for them. A source's
    change is consolidated where it is read. `right_keys`, in place of `dr`: the right input's
    keys, a relation of keys already (restricted_reads.keys_below_grouping)."""
    assert dr is None or right_keys is None, "the right input's change or its keys, not both"
    parts: list = []
    for d, side, child in ((dl, 0, node.left), (dr, 1, node.right)):
        if d is not None:
            if not isinstance(child, Scan):
                d = consolidate(ctx, d.copy(), list(child.columns))
            parts.append(keys_of(ctx, d, [p[side] for p in pairs]))
    if right_keys is not None:
        parts.append(right_keys)
    return union_all(parts)


def _strict_keys(ctx: Context, node: KeyRestricted, keys: exp.Expr) -> exp.Expr:
    """`keys` (of the right input, in key_pairs' order) but those with a NULL in a strict key
    (strict_keys: an `=` of a LEFT, semi or anti join), which no left row meets (as `matching`
    drops such change rows). None for a full join, whose right rows of a NULL key are padded
    into output rows of their own."""
    strict = {b.sql() for b in strict_keys(node)[1]}
    nulls = [col(f"{restricted_reads.KEY}{i}") for i, (_, b) in enumerate(key_pairs(node)) if b.sql() in strict]
    return matching(ctx, keys, nulls)


# -- window functions: one input, keyed by the PARTITION BY expressions all calls share --------


def window_plain(node: Window, ctx: Context, child_sql) -> exp.Select:
    cols = [col(c) for c in node.child.columns] + [alias(c.copy(), n) for c, n in zip(node.calls, node.names)]
    return select_from(cols, sub(child_sql, ctx.alias("w")))


def window_delta(node: Window, ctx: Context, delta_of, plain_of):
    """Δ(W(R)) = W(R_new ⋉ K) − W(R_old ⋉ K), K = the partitions present in ΔR: only touched
    partitions are recomputed. Without a common PARTITION BY the whole input is (documented)."""
    d = delta_of(node.child)
    if d is None:
        return None
    keys = None
    if node.partition_keys:
        keys = keys_of(ctx, d, node.partition_keys)

    def at(version):
        rows = plain_of(node.child, version)
        return window_plain(node, ctx, restrict(ctx, rows, node.partition_keys, keys) if keys is not None else rows)

    return new_minus_old(ctx, node.columns, at)


class KeyRestrictedOperator(Operator):
    """Outer, semi and anti joins and INTERSECT / EXCEPT: recomputed for the changed keys."""

    nodes = (OuterJoin, SemiJoin, SetOp)

    @classmethod
    def plain(cls, node: Node, ctx: Context, version: str, walk: Walk) -> exp.Expr:
        assert isinstance(node, (OuterJoin, SemiJoin, SetOp))
        return plain(node, ctx, walk.plain(node.left, version), walk.plain(node.right, version))

    @classmethod
    def delta(cls, node: Node, ctx: Context, walk: Walk) -> exp.Expr | None:
        assert isinstance(node, (OuterJoin, SemiJoin, SetOp))
        return delta(node, ctx, walk.delta, walk.plain)

    @classmethod
    def copied_from(cls, node: Node, name: str, ref: str) -> str | None:
        # A left row is kept or dropped whole by a semi / anti / left join: its columns are copies;
        # a right or full join pads with NULLs, a set operation matches whole rows.
        if isinstance(node, SemiJoin) or (isinstance(node, OuterJoin) and node.kind == "left"):
            if name in node.left.columns:
                return copied_from(node.left, name, ref)
            return None if isinstance(node, OuterJoin) else copied_from(node.right, name, ref)
        return None


class WindowOperator(Operator):
    nodes = (Window,)

    @classmethod
    def plain(cls, node: Node, ctx: Context, version: str, walk: Walk) -> exp.Expr:
        assert isinstance(node, Window)
        return window_plain(node, ctx, walk.plain(node.child, version))

    @classmethod
    def delta(cls, node: Node, ctx: Context, walk: Walk) -> exp.Expr | None:
        assert isinstance(node, Window)
        return window_delta(node, ctx, walk.delta, walk.plain)
