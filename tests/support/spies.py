"""Spies on the rewrites that may hand back their input unchanged: a test learns whether each
call did its work (returned something else) while the refresh runs as it would."""

from __future__ import annotations

from typing import Optional


def replaced(monkeypatch, module, name: str, calls: Optional[list] = None) -> list:
    """Wrap `module.name` (called with the input as its second argument, after the context); the
    list returned (`calls`, when given: one list for the name in several modules) gets, per
    call, whether the result differs from that input."""
    original = getattr(module, name)
    calls = [] if calls is None else calls

    def spy(ctx, given, *args):
        out = original(ctx, given, *args)
        calls.append(out is not given)
        return out

    monkeypatch.setattr(module, name, spy)
    return calls
