"""Which steps of a WITH RECURSIVE may read the working table: a step must be linear in it
(semi-naive evaluation adds up the steps' outputs over the working table's new rows), so every
read must pass only through operators that map a sum of inputs to the sum of outputs."""

from __future__ import annotations

from sqlglot import exp

from python_helpers.dvm.tree import Filter, Generate, Join, Node, OuterJoin, Project, Scan, SemiJoin, UnionAll


def reads_itself(query: exp.Expr, name: str) -> bool:
    """Does `query` read the CTE `name` (an unqualified table of that name)?"""
    return any(not t.db and t.name.lower() == name for t in query.find_all(exp.Table))


# Operators through which a step may read the working table: each maps a sum of inputs to the
# sum of outputs (given its other inputs), so the step is linear in the working table. For the
# two-input ones, only on the side whose delta rule is linear when the other side is fixed.
_LINEAR_ANY_SIDE = (Filter, Project, Generate, UnionAll, Join)


def working_table_reads(node: Node, ref: str) -> int:
    """How often `node` reads the working table `ref`; raises where a read is not linear."""
    if isinstance(node, Scan):
        return int(node.relation == ref)
    counts = [working_table_reads(c, ref) for c in node.children()]
    if not any(counts) or isinstance(node, _LINEAR_ANY_SIDE):
        return sum(counts)
    if isinstance(node, SemiJoin) or (isinstance(node, OuterJoin) and node.kind == "left"):
        if counts[1] == 0:
            return counts[0]
    raise NotLinear(type(node).__name__)


class NotLinear(Exception):
    """A step reads the working table through an operator whose delta is not linear in it."""
