"""A chain of inner joins under its predicate, differentiated as one n-ary join.

    Δ(σ_p(S1 ⋈ ... ⋈ Sn)) = σ_p( Σ_i  S1_new ⋈ ... ⋈ S(i-1)_new ⋈ ΔSi ⋈ S(i+1)_old ⋈ ... ⋈ Sn_old )

This is the binary rule of operators/join.py unrolled (the terms telescope to new − old), but
each term is written *starting from its delta*: ΔSi is joined first to an input it shares a
predicate with, then to the next, and so on. With the predicate's conjuncts placed at the first
join where their columns are present, every intermediate result stays about as small as the
delta, and each snapshot is only scanned and probed once. The binary form would instead join
the large snapshots S1 ⋈ ... ⋈ S(i-1) to each other before meeting ΔSi.

When the engine says the delta is small, each growing intermediate is marked for broadcast, so
Spark probes a snapshot with a hash of the delta instead of shuffling the snapshot.
"""

from __future__ import annotations

from sqlglot import exp

from python_helpers.dvm.operators import linear, restricted_reads, scan
from python_helpers.dvm.sqlgen import Context, alias, col, select_from, sub, union_all, weight
from python_helpers.dvm.tree import WEIGHT, Filter, Join, Node, Project, Scan
from python_helpers.sql.predicates import conjuncts


def flatten(node: Node) -> tuple[list[Node], list[exp.Expr]]:
    """Inputs of a tree of inner joins (left to right) and the conjuncts of its conditions."""
    if not isinstance(node, Join):
        return [node], []
    left, lconds = flatten(node.left)
    right, rconds = flatten(node.right)
    return left + right, lconds + rconds + conjuncts(node.condition)


def _owners(condition: exp.Expr, owner_of: dict, n: int) -> frozenset:
    names = [c.name for c in condition.find_all(exp.Column)]
    if any(name not in owner_of for name in names):
        return frozenset(range(n))  # unknown column: apply once everything is joined
    return frozenset(owner_of[name] for name in names)


def counted_plain(node: Node, ctx: Context, version: str):
    """A Project / Filter chain over a bag upstream's scan, each distinct row once with its count
    as weight (the linear delta rules applied to the snapshot); None for any other input."""
    if isinstance(node, Scan):
        return scan.weighted_plain(node, ctx, version, WEIGHT) if node.weight_column is not None else None
    if isinstance(node, (Project, Filter)):
        child = counted_plain(node.child, ctx, version)
        if child is None:
            return None
        return (
            linear.project_delta(node, ctx, child)
            if isinstance(node, Project)
            else linear.filter_delta(node, ctx, child)
        )
    return None


def _keyed_input(ctx: Context, changed: Node, other: Node, on: list, version: str):
    """A source joined on an equality with a column of the term's changed source (whose
    columns every step carries) is read only from what can hold the change's values in that
    column (restricted_reads.keyed_read): an equality matches no other row, NULL included."""
    if not isinstance(changed, Scan) or not isinstance(other, Scan):
        return None
    for cond in on:
        if not isinstance(cond, exp.EQ):
            continue
        a, b = cond.this, cond.expression
        if not (isinstance(a, exp.Column) and isinstance(b, exp.Column)):
            continue
        for mine, theirs in ((a.name, b.name), (b.name, a.name)):
            if mine in other.columns and theirs in changed.columns:
                rendered = restricted_reads.keyed_read(ctx, other, version, mine, changed, theirs)
                if rendered is not None:
                    return rendered
    return None


def chain_delta(node: Node, ctx: Context, delta, plain):
    """Δ of `node`: Filter(Join tree) or a Join tree. `delta(n)` / `plain(n, version)` render
    the inputs (callables, so unneeded snapshots are never rendered). None when no input changed."""
    predicate = node.predicate if isinstance(node, Filter) else None
    join = node.child if isinstance(node, Filter) else node
    inputs, conds = flatten(join)
    conds = conds + conjuncts(predicate)
    owner_of = {c: i for i, n in enumerate(inputs) for c in n.columns}
    owners = [_owners(c, owner_of, len(inputs)) for c in conds]
    terms = []
    for i, changed_input in enumerate(inputs):
        d = delta(changed_input)
        if d is None:
            continue
        terms.append(_term(node, ctx, i, d, inputs, conds, owners, plain))
    return union_all(terms)


def _term(node: Node, ctx: Context, i: int, d, inputs: list, conds: list, owners: list, plain) -> exp.Select:
    joined = {i}
    applied = [False] * len(conds)

    def ready(extra: set) -> list:
        out = []
        for k, (c, own) in enumerate(zip(conds, owners)):
            if not applied[k] and own <= joined | extra:
                applied[k] = True
                out.append(c.copy())
        return out

    multiplicities = []  # columns carrying the row counts of weighted snapshots joined
    own_filter = ready(set())  # conjuncts over the changed input alone filter its delta first
    if own_filter:
        d = select_from([exp.Star()], sub(d, ctx.alias("dd"))).where(exp.and_(*own_filter), copy=False)
    current = sub(d, ctx.alias("d"))
    remaining = [j for j in range(len(inputs)) if j != i]
    while remaining:
        # Next: an input that some not-yet-applied conjunct ties to what is joined (an equi
        # join, usually); an input tied to nothing comes last, as a cross join.
        tied = [
            j
            for j in remaining
            if any(not applied[k] and j in own and own & joined and own <= joined | {j} for k, own in enumerate(owners))
        ]
        # Inputs tied to the changed input itself first: they are read only where the change's
        # keys can be (_keyed_input), and they keep the intermediate result small.
        direct = [j for j in tied if any(not applied[k] and own == frozenset({i, j}) for k, own in enumerate(owners))]
        j = direct[0] if direct else tied[0] if tied else remaining[0]
        remaining.remove(j)
        version = "new" if j < i else "old"
        ra = ctx.alias("r")
        on = ready({j})
        joined.add(j)
        step = select_from([exp.Star()], current)
        if ctx.small_delta:
            step.set(
                "hint",
                exp.Hint(expressions=[exp.Anonymous(this="BROADCAST", expressions=[exp.to_identifier(current.alias)])]),
            )
        other = inputs[j]
        keyed = _keyed_input(ctx, inputs[i], other, on, version)
        counted = counted_plain(other, ctx, version)
        if counted is not None:
            # A bag upstream joined by its stored rows, each once, with its count as a factor.
            name = f"__dvm_m{ctx.alias('m')}"
            multiplicities.append(name)
            rendered = select_from(
                [col(c) for c in other.columns] + [alias(weight(), name)], sub(counted, ctx.alias("cp"))
            )
        elif keyed is not None:
            rendered = keyed
        else:
            rendered = plain(other, version)
        step = step.join(
            sub(rendered, ra), on=exp.and_(*on) if on else None, join_type=None if on else "CROSS", copy=False
        )
        current = sub(step, ctx.alias("j"))
    w: exp.Expr = weight(current.alias)
    for m in multiplicities:
        w = exp.Mul(this=w, expression=col(m, current.alias))
    cols = [col(c) for c in node.columns] + [alias(w, WEIGHT)]
    out = select_from(cols, current)
    rest = ready(set(range(len(inputs))))  # conjuncts over no input's columns (constants)
    return out.where(exp.and_(*rest), copy=False) if rest else out
