"""Push a key restriction down to the base of a recursion, where a semi join above it cannot go.

A group rescan (MIN / MAX after a deletion, any rescan aggregate) reads the aggregate's input
restricted to the flagged keys. When that input is a WITH RECURSIVE, Spark evaluates the whole
recursion before the restriction, which costs a rebuild. But when every step copies a key
column unchanged from the working table (`SELECT r.top, e.child ... FROM r JOIN e ...`), every
row of R descends from a base row with the same key, so

    R ⋉ K  =  the recursion run from (base ⋉ K)

and only the flagged keys' derivations are computed. `restricted` returns a copy of the path
from the aggregate's input down to such a recursion with its base restricted, or None when the
keys are not carried (the caller then restricts above, as before). Each operator answers for
its own node (`Operator.restricted`, `Operator.copied_from` in dvm/operators/): Filter and
Project pass the restriction to their input, Recursive restricts its base.
"""

from __future__ import annotations

# Importing the operator modules registers every operator.
from python_helpers.dvm import differentiate  # noqa: F401
from python_helpers.dvm.operators.base import copied_from, restricted

__all__ = ["copied_from", "restricted"]
