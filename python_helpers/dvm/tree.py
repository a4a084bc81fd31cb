"""The operator tree a defining query is turned into.

Every node outputs a relation with named columns (`columns`). Expressions held by a node refer
to its input's columns by bare name (`exp.column(name)`), and names are unique within an input,
so generated SQL never needs table qualifiers. During a refresh every relation may also carry
the weight column `__dvm_w` (docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from sqlglot import exp

WEIGHT = "__dvm_w"
RECURSION_PREFIX = "__dvm_rec_"  # the relation name of a recursive CTE's working table

# Aggregate strategies (docs/supported-sql.md)
ALGEBRAIC = "algebraic"
SEMI_ALGEBRAIC = "semi-algebraic"
RESCAN = "group-rescan"


@dataclass
class Node:
    columns: list[str]

    def children(self) -> list["Node"]:
        return []

    def relations(self) -> set[str]:
        out: set[str] = set()
        for child in self.children():
            out |= child.relations()
        return out


@dataclass
class Scan(Node):
    """A Delta source; `source_columns[i]` is read as `columns[i]` (None: a constant TRUE column,
    used when the query reads no column of the table, e.g. COUNT(*))."""

    relation: str = ""
    source_columns: list[Optional[str]] = field(default_factory=list)
    # A column holding each row's multiplicity (an upstream bag stream table stores a tuple
    # once with its count): the relation holds every row that many times.
    weight_column: Optional[str] = None

    def relations(self) -> set[str]:
        return {self.relation}


@dataclass(kw_only=True)
class Filter(Node):
    child: Node
    predicate: exp.Expr

    def children(self):
        return [self.child]


@dataclass(kw_only=True)
class Project(Node):
    child: Node
    exprs: list[exp.Expr] = field(default_factory=list)  # one per output column

    def children(self):
        return [self.child]


@dataclass(kw_only=True)
class Join(Node):
    """Inner join (a cross join when `condition` is None). Output: left columns, then right."""

    left: Node
    right: Node
    condition: Optional[exp.Expr] = None

    def children(self):
        return [self.left, self.right]


@dataclass(kw_only=True)
class OuterJoin(Node):
    """LEFT or FULL outer join (RIGHT is built as LEFT with the inputs swapped). Output: left
    columns, then right; a row without a match is padded with NULLs on the other side."""

    left: Node
    right: Node
    condition: Optional[exp.Expr] = None
    kind: str = "left"  # left | full

    def children(self):
        return [self.left, self.right]


@dataclass(kw_only=True)
class SemiJoin(Node):
    """Rows of `left` with (semi) or without (anti) a row of `right` meeting `condition`.
    Output: the left columns. EXISTS / IN become semi joins, NOT EXISTS / NOT IN anti joins
    (python_helpers.sql.rewrites)."""

    left: Node
    right: Node
    condition: Optional[exp.Expr] = None
    anti: bool = False

    def children(self):
        return [self.left, self.right]


@dataclass(kw_only=True)
class SetOp(Node):
    """INTERSECT / EXCEPT, ALL (bag) or distinct; the right input's columns match by position."""

    left: Node
    right: Node
    op: str = "intersect"  # intersect | except
    all: bool = False

    def children(self):
        return [self.left, self.right]


@dataclass(kw_only=True)
class Window(Node):
    """Window functions over `child`. Output: the child's columns, then one per call. The calls
    share `partition_keys` (the PARTITION BY expressions common to all of them; [] if none)."""

    child: Node
    calls: list[exp.Expr] = field(default_factory=list)  # exp.Window over child columns
    names: list[str] = field(default_factory=list)
    partition_keys: list[exp.Expr] = field(default_factory=list)

    def children(self):
        return [self.child]


@dataclass(kw_only=True)
class Generate(Node):
    """LATERAL VIEW [OUTER] <generator>: each input row once per generated row (OUTER: once
    with NULLs when the generator yields none). Output: the child's columns, then `names`."""

    child: Node
    generator: exp.Expr  # over the child's columns
    outer: bool = False
    names: list[str] = field(default_factory=list)

    def children(self):
        return [self.child]


@dataclass(kw_only=True)
class Recursive(Node):
    """WITH RECURSIVE name(names) AS (base UNION ALL step_1 UNION ALL ...): the bag fixpoint
    R = base + F(R), F = the sum of the steps. Each step reads the working table once, as the
    Scan of relation `ref` (columns `names`), through linear operators only (checked by the
    builder), so F is linear in R. Output: `columns`, matched by position to `names`."""

    base: Node
    steps: list[Node] = field(default_factory=list)
    ref: str = ""
    names: list[str] = field(default_factory=list)

    def children(self):
        return [self.base] + list(self.steps)

    def relations(self) -> set[str]:
        return super().relations() - {self.ref}


@dataclass(kw_only=True)
class KeyFilter(Node):
    """Rows of `child` whose `key_exprs` (over the child's columns) appear, null-safe, in the
    rendered query `keys` (columns `key_names`). Never built from SQL: python_helpers.dvm.restrict
    places it at a recursion's base when a group rescan restricts the recursion's output."""

    child: Node
    key_exprs: list = field(default_factory=list)
    keys: exp.Expr
    key_names: list[str] = field(default_factory=list)

    def children(self):
        return [self.child]


@dataclass
class AggCall:
    name: str  # output column of the Aggregate node
    kind: str  # count_star | count | sum | avg | min | max | var_pop | var_samp | stddev_pop | stddev_samp | other
    arg: Optional[exp.Expr]  # the (FILTER-folded) argument, for the algebraic kinds
    expr: exp.Expr  # the whole aggregate call over the input columns (used by rescans)

    @property
    def strategy(self) -> str:
        if self.kind in ("min", "max"):
            return SEMI_ALGEBRAIC
        if self.kind == "other":
            return RESCAN
        return ALGEBRAIC


@dataclass(kw_only=True)
class Aggregate(Node):
    """GROUP BY `keys` computing `aggs`. Output: key columns, then aggregate columns."""

    child: Node
    keys: list[exp.Expr] = field(default_factory=list)
    key_names: list[str] = field(default_factory=list)
    aggs: list[AggCall] = field(default_factory=list)

    def children(self):
        return [self.child]


@dataclass(kw_only=True)
class Distinct(Node):
    child: Node

    def children(self):
        return [self.child]


@dataclass
class UnionAll(Node):
    """Bag union; child i's columns are matched by position to `columns`."""

    inputs: list[Node] = field(default_factory=list)

    def children(self):
        return list(self.inputs)


def walk(node: Node):
    """The node and everything below it, parents first."""
    yield node
    for child in node.children():
        yield from walk(child)


def describe(node: Node, indent: int = 0) -> str:
    """A readable operator tree (for logs, docs and explain)."""
    pad = "  " * indent
    name = type(node).__name__
    if isinstance(node, Scan):
        line = f"{pad}Scan {node.relation} [{', '.join(c or 'TRUE' for c in node.source_columns)}]"
    elif isinstance(node, Filter):
        line = f"{pad}Filter {node.predicate.sql('spark')}"
    elif isinstance(node, Project):
        line = f"{pad}Project {', '.join(e.sql('spark') for e in node.exprs)}"
    elif isinstance(node, Join):
        cond = node.condition.sql("spark") if node.condition is not None else "TRUE"
        line = f"{pad}Join ON {cond}"
    elif isinstance(node, OuterJoin):
        cond = node.condition.sql("spark") if node.condition is not None else "TRUE"
        line = f"{pad}{node.kind.capitalize()}OuterJoin ON {cond}"
    elif isinstance(node, SemiJoin):
        cond = node.condition.sql("spark") if node.condition is not None else "TRUE"
        line = f"{pad}{'AntiJoin' if node.anti else 'SemiJoin'} ON {cond}"
    elif isinstance(node, Generate):
        line = f"{pad}Generate{' OUTER' if node.outer else ''} {node.generator.sql('spark')} AS {', '.join(node.names)}"
    elif isinstance(node, Window):
        keys = ", ".join(k.sql("spark") for k in node.partition_keys) or "() - whole input"
        line = f"{pad}Window BY {keys}: {', '.join(c.sql('spark') for c in node.calls)}"
    elif isinstance(node, Recursive):
        line = f"{pad}Recursive {node.ref}({', '.join(node.names)}): base, then {len(node.steps)} step(s)"
    elif isinstance(node, SetOp):
        line = f"{pad}{node.op.capitalize()}{' ALL' if node.all else ''}"
    elif isinstance(node, Aggregate):
        aggs = ", ".join(f"{a.expr.sql('spark')} [{a.strategy}]" for a in node.aggs)
        keys = ", ".join(k.sql("spark") for k in node.keys) or "()"
        line = f"{pad}Aggregate BY {keys}: {aggs}"
    else:
        line = f"{pad}{name}"
    return "\n".join([line] + [describe(c, indent + 1) for c in node.children()])
