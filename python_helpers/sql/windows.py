"""Window clauses of a query block."""

from __future__ import annotations

from sqlglot import exp

from python_helpers.sql.rewrites.blocks import here


def inline_named_windows(select: exp.Select) -> None:
    """`OVER w ... WINDOW w AS (...)`: copy each named definition into the calls that use it."""
    defs = {w.name.lower(): w for w in select.args.get("windows") or []}
    if not defs:
        return
    # Only this block's own calls: a subquery's `OVER w` names its own WINDOW clause.
    own = [n for p in select.expressions for n in here(p) if isinstance(n, exp.Window)]
    for call in own:
        ref = call.args.get("alias")
        if ref is not None and ref.name.lower() in defs:
            spec = defs[ref.name.lower()]
            for key in ("partition_by", "order", "spec"):
                if not call.args.get(key) and spec.args.get(key):
                    call.set(key, spec.args[key].copy())
            call.set("alias", None)
    select.set("windows", None)
