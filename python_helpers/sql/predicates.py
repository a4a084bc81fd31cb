"""Small helpers over boolean expressions shared by the rewrites and the delta rules."""

from __future__ import annotations

from sqlglot import exp


def conjuncts(predicate) -> list[exp.Expr]:
    """The AND-ed parts of a predicate (parentheses and TRUE dropped)."""
    if predicate is None:
        return []
    if isinstance(predicate, exp.And):
        return conjuncts(predicate.this) + conjuncts(predicate.expression)
    if isinstance(predicate, exp.Paren):
        return conjuncts(predicate.this)
    if isinstance(predicate, exp.Boolean) and predicate.this:
        return []  # TRUE
    return [predicate]
