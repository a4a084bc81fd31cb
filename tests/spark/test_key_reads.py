"""A changed source read for computed keys with Arrow in the dbt process (embedded engine:
bindings.rows_for_keys, runtime/delta/embedded/key_reads.py), checked against the oracle over
inserts, updates, deletes, duplicates and NULL keys (about 45 s here for the three shapes). Keys
copied from a change the dbt process holds are listed from it (key_lineage.py); each shape
takes that path at least once. And a join's other input read with Arrow for the keys of a
change scattered over most of its files (bindings.keyed_snapshot), two shapes (about 30 s).

The test sources are small, and a source Spark would broadcast itself is read by Spark: the
tests take every source as large (Bindings.large_source), as the demo's orders are."""

from __future__ import annotations

import re

import pytest

from python_helpers.dvm.sqlgen import render
from python_helpers.runtime.delta.embedded import bindings, key_lineage
from tests.support.shapes import INITIAL, SHAPES_BY_NAME, SMOKE_BATCHES

pytestmark = pytest.mark.spark

# An IN subquery as a value (a semi join's verdict per row), as the demo's north_flags: the keys
# are computed (the subquery's change), and both the changed source and the subquery's source
# (through its grouping) are read for them; a DISTINCT under an aggregate and nested groupings
# (a changed source recomputed for its changed groups). Where a source's own change gives the
# keys (an outer join), the keyed read by statistics comes first and this path is not taken.
SHAPES = {
    "in_as_value": SHAPES_BY_NAME["in_as_value"].sql,
    # north_flags itself: every key is a copy of a change the dbt process holds (the changed
    # rows' own keys and, below the subquery's count per key, its source's changed keys).
    "one_in_as_value": "SELECT a.id, a.k IN (SELECT b.k FROM {src}.t2 b WHERE b.g <> 'c') AS f FROM {src}.t1 a",
    "distinct_below": "SELECT g, COUNT(DISTINCT k) AS dk FROM {src}.t1 GROUP BY g",
    "nested_groups": (
        "SELECT n, COUNT(*) AS ks FROM (SELECT k, COUNT(*) AS n FROM {src}.t1 WHERE v > -3 GROUP BY k) GROUP BY n"
    ),
}

EVERY_LISTING_HELD = {"one_in_as_value"}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_a_source_read_for_computed_keys_in_arrow_matches_the_oracle(env, monkeypatch, name):
    monkeypatch.setattr(bindings.Bindings, "large_source", lambda self, relation: True)
    held = []  # what each listing of keys found in rows the dbt process holds (None: Spark lists)
    listed = key_lineage.held_values

    def spied(*args):
        held.append(listed(*args))
        return held[-1]

    monkeypatch.setattr(key_lineage, "held_values", spied)
    reads = _refreshed_against_the_oracle(env, f"keys_{name}", SHAPES[name], "reads_for_computed_keys")
    assert reads > 0, f"{name}: no source was read for its keys in Arrow"
    assert any(h is not None for h in held), f"{name}: every key listing cost a Spark job"
    if name in EVERY_LISTING_HELD:
        assert held and all(h is not None for h in held), f"{name}: a key listing cost a Spark job"


# A join's delta reads the other input only where it can meet the change's keys; the test
# sources are one file each, so statistics rule out none and the rows are read with Arrow.
JOIN_SHAPES = ["join_agg", "left_join"]
ARROW_VIEW = re.compile(r"_(old|new)_a\d+")


@pytest.mark.parametrize("name", JOIN_SHAPES)
def test_a_join_input_read_with_arrow_for_scattered_change_keys_matches_the_oracle(env, monkeypatch, name):
    monkeypatch.setattr(bindings.Bindings, "large_source", lambda self, relation: True)
    served = []  # per keyed read: was it read with Arrow?
    keyed = bindings.Bindings._keyed_snapshot

    def spied(self, *args):
        found = keyed(self, *args)
        if found is not None:
            served.append(bool(ARROW_VIEW.search(render(found))))
        return found

    monkeypatch.setattr(bindings.Bindings, "_keyed_snapshot", spied)
    sql = SHAPES_BY_NAME[name].sql
    filtered = _refreshed_against_the_oracle(env, f"arrow_keyed_{name}", sql, "reads_filtered_by_keys")
    assert any(served), f"{name}: no keyed read was served with Arrow"
    assert filtered > 0, f"{name}: the refreshes counted no read filtered by keys"


def _refreshed_against_the_oracle(env, stream_name: str, sql: str, counter: str) -> int:
    """Build the stream table, refresh it after each smoke batch and check it against the
    recompute each time; the sum of `counter` over the refreshes."""
    for t in ("t1", "t2", "t3"):
        env.source(t, INITIAL[t])
    stream = env.stream(stream_name, sql, refresh_mode="differential")
    stream.refresh(expect="full")
    total = 0
    for batch in SMOKE_BATCHES:
        env.apply(batch, only_existing=True)
        total += stream.refresh(expect="differential").counters[counter]
        stream.check()
    return total
