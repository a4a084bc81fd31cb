"""Stored rows and changes of a small bag over (k bigint, v string), for the unit tests of a
bag's change applied in the dbt process (tests/unit/test_bag_lookup.py, test_bag_rewrite.py)."""

from __future__ import annotations

import pyarrow as pa

from python_helpers.dvm.stored_reads import COUNT
from python_helpers.dvm.tree import WEIGHT

COLUMNS = ["k", "v"]
TUPLES = [(k, v) for k in (None, 1, 2) for v in (None, "a", "b")]


def stored_table(rows: list) -> pa.Table:
    """Stored rows [((k, v), count)] as the stored result holds them."""
    return pa.table(
        {
            "k": pa.array([t[0] for t, _ in rows], pa.int64()),
            "v": pa.array([t[1] for t, _ in rows], pa.string()),
            COUNT: pa.array([c for _, c in rows], pa.int64()),
        }
    )


def change_table(weights: dict) -> pa.Table:
    """A consolidated change {(k, v): weight}, one row per tuple."""
    items = sorted(weights.items(), key=repr)
    return pa.table(
        {
            "k": pa.array([t[0] for t, _ in items], pa.int64()),
            "v": pa.array([t[1] for t, _ in items], pa.string()),
            WEIGHT: pa.array([w for _, w in items], pa.int64()),
        }
    )


def totals(rows: list) -> dict:
    """{tuple: its count} of stored rows [((k, v), count)], tuples of count 0 left out."""
    out: dict = {}
    for t, c in rows:
        out[t] = out.get(t, 0) + c
    return {t: c for t, c in out.items() if c}
