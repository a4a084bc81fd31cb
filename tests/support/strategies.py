"""Hypothesis strategies: initial source rows and sequences of change batches (tests/support/sources.py)."""

from __future__ import annotations

import datetime
import decimal
import os

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from tests.support import sources as S

KEYS_NN = st.integers(0, 3)
GROUPS_NN = st.sampled_from(["a", "b", "c"])
VALUES_NN = st.integers(-5, 5)
DOUBLES_NN = st.one_of(
    st.sampled_from([0.0, 1.0, -1.0, 2.5, 0.1, 1e3, -7.25]),
    st.floats(-1000, 1000, allow_nan=False, allow_infinity=False).map(lambda f: round(f, 3)),
)
DECIMALS_NN = st.one_of(
    st.integers(-100000, 100000).map(lambda n: decimal.Decimal(n).scaleb(-2)),
    st.sampled_from([decimal.Decimal("0.00"), decimal.Decimal("1.50"), decimal.Decimal("-0.01")]),
)
DATES_NN = st.integers(0, 70).map(lambda n: datetime.date(2023, 12, 20) + datetime.timedelta(days=n))
NON_NULL_VALUES = {"k": KEYS_NN, "g": GROUPS_NN, "v": VALUES_NN, "x": DOUBLES_NN, "d": DECIMALS_NN, "dt": DATES_NN}
KEYS, GROUPS, VALUES, DOUBLES, DECIMALS, DATES = (
    st.one_of(st.none(), s) for s in (KEYS_NN, GROUPS_NN, VALUES_NN, DOUBLES_NN, DECIMALS_NN, DATES_NN)
)
COLUMN_VALUES = {"k": KEYS, "g": GROUPS, "v": VALUES, "x": DOUBLES, "d": DECIMALS, "dt": DATES}


@st.composite
def source_rows(draw):
    r = {c: draw(s) for c, s in COLUMN_VALUES.items()}
    r["id"] = None
    return r


def initial_rows(min_size=0, max_size=12):
    """Rows of a new source table (ids 1..n, with some exact duplicates)."""

    @st.composite
    def _rows(draw):
        rows = draw(st.lists(source_rows(), min_size=min_size, max_size=max_size))
        out = []
        for i, r in enumerate(rows, start=1):
            r = dict(r, id=i)
            out.append(r)
        dups = draw(st.lists(st.integers(0, 100), max_size=3)) if out else []
        out.extend(dict(out[p % len(out)]) for p in dups)
        return out

    return _rows()


def unique_rows(min_size=0, max_size=12):
    """Rows of a new source table whose ids are unique (1..n): a declared unique key."""

    @st.composite
    def _rows(draw):
        rows = draw(st.lists(source_rows(), min_size=min_size, max_size=max_size))
        return [dict(r, id=i) for i, r in enumerate(rows, start=1)]

    return _rows()


def _updates(columns):
    return st.sets(st.sampled_from(columns), min_size=1, max_size=3).flatmap(
        lambda cols: st.fixed_dictionaries({c: COLUMN_VALUES[c] for c in sorted(cols)})
    )


def change_op(tables, columns=S.VALUE_COLUMNS, unique_ids=False):
    """One change to one of `tables` (`unique_ids`: none that repeats an id)."""
    table = st.sampled_from(list(tables))
    picks = st.lists(st.integers(0, 1000), min_size=1, max_size=3)
    extreme_col = st.sampled_from([c for c in ("v", "x", "d", "dt", "g") if c in columns] or ["v"])
    return st.one_of(
        st.builds(S.Insert, table, st.lists(source_rows(), min_size=1, max_size=4)),
        st.builds(S.InsertDuplicates, table, picks) if not unique_ids else st.nothing(),
        st.builds(S.UpdateRows, table, picks, _updates(list(columns))),
        st.sampled_from(["k", "g"]).flatmap(
            lambda c: st.builds(S.UpdateWhere, table, st.just(c), COLUMN_VALUES[c], _updates(list(columns)))
        ),
        st.builds(S.DeleteRows, table, picks),
        st.sampled_from(["k", "g"]).flatmap(lambda c: st.builds(S.DeleteWhere, table, st.just(c), COLUMN_VALUES[c])),
        st.builds(S.DeleteExtreme, table, extreme_col, st.sampled_from(["min", "max"]), st.just("k"), KEYS),
        st.builds(S.DeleteExtreme, table, extreme_col, st.sampled_from(["min", "max"]), st.just(None), st.none()),
        extreme_col.flatmap(
            lambda c: st.builds(
                S.UpdateExtreme,
                table,
                st.just(c),
                st.sampled_from(["min", "max"]),
                st.just("k"),
                KEYS,
                COLUMN_VALUES[c],
            )
        ),
    )


def change_batch(tables, min_size=1, max_size=5, delete_all_weight=0.08, unique_ids=False):
    """A batch of changes applied between two refreshes (each op is its own Delta commit)."""
    ops = st.lists(change_op(tables, unique_ids=unique_ids), min_size=min_size, max_size=max_size)

    @st.composite
    def _batch(draw):
        batch = draw(ops)
        # Now and then, empty a table (then maybe refill it) within the batch.
        if draw(st.floats(0, 1)) < delete_all_weight:
            t = draw(st.sampled_from(list(tables)))
            batch.append(S.DeleteAll(t))
            if draw(st.booleans()):
                batch.append(S.Insert(t, draw(st.lists(source_rows(), min_size=1, max_size=3))))
        return batch

    return _batch()


def change_batches(tables, n=3):
    return st.lists(change_batch(tables), min_size=n, max_size=n)


# ---------------------------------------------------------------------------------------------
# Settings


def examples(default: int = 6) -> int:
    """max_examples for a property test: DVM_HYPOTHESIS_EXAMPLES overrides the default."""
    return int(os.environ.get("DVM_HYPOTHESIS_EXAMPLES", default))


def slow_examples(default: int = 40) -> int:
    return int(os.environ.get("DVM_HYPOTHESIS_SLOW_EXAMPLES", default))


def _phases():
    # Shrinking re-runs Spark refreshes many times; opt in with DVM_HYPOTHESIS_SHRINK=1.
    if os.environ.get("DVM_HYPOTHESIS_SHRINK", "0") == "1":
        return tuple(Phase)
    return (Phase.explicit, Phase.reuse, Phase.generate)


def dvm_settings(max_examples: int):
    return settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
        phases=_phases(),
        print_blob=True,
    )
