"""Every operator shape against the oracle: build in full, then differential refreshes after
change batches, each result compared with the query recomputed on the sources.

- test_shape_smoke: one deterministic run of every shape (tests/support/shapes.py: INITIAL data
  and SMOKE_BATCHES: duplicates, key moves, NULLs, MIN/MAX deletes, whole-group deletes,
  emptying and refilling a table), the shapes of a family side by side over one set of sources
  (as a dbt project's models share theirs): one failing shape is reported with the others'
  results, never hidden by them. DVM_SHAPES=name,name runs only those shapes; otherwise
  DVM_ROTATION=k runs a k-th of each family's shapes by the day (tests/support/rotation.py).
- test_family_random_changes: hypothesis draws initial rows and 3 change batches; every shape of
  the family is refreshed over the same sources. DVM_HYPOTHESIS_EXAMPLES sets the example count.
- NULL-heavy and duplicate-heavy data; a slow variant with many more examples (-m slow).
"""

from __future__ import annotations

import os
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from python_helpers.runtime.delta.embedded import bindings as embedded_bindings
from tests.support import rotation
from tests.support import sources as S
from tests.support import strategies as gen
from tests.support.harness import StreamEnv, run_cycles
from tests.support.shapes import FAMILIES, INITIAL, SHAPES, SMOKE_BATCHES, shapes

pytestmark = pytest.mark.spark


def _sources(env, tables, draw_rows):
    for t in tables:
        env.source(t, draw_rows(t))


def _smoke_shapes(family: str) -> list:
    wanted = {n.strip() for n in os.environ.get("DVM_SHAPES", "").split(",") if n.strip()}
    unknown = wanted - {s.name for s in SHAPES}
    assert not unknown, f"DVM_SHAPES names no shape: {sorted(unknown)}"
    if wanted:
        return [s for s in shapes(family) if s.name in wanted]
    return rotation.todays(shapes(family))


@pytest.mark.every_run  # the oracle of every family, a share of its shapes by the day
@pytest.mark.parametrize("family", FAMILIES)
def test_shape_smoke(spark, family):
    chosen = _smoke_shapes(family)
    if not chosen:
        pytest.skip(f"DVM_SHAPES={os.environ.get('DVM_SHAPES')} names no shape of the {family} family")
    env = StreamEnv(spark, tag=family[:12])
    _sources(env, ("t1", "t2", "t3"), lambda t: INITIAL[t])  # changes to unread tables too
    # refresh_mode='differential': the oracle tests the delta rules, which auto's cost rules would
    # sometimes bypass (a window without PARTITION BY refreshes in full under auto).
    streams = [env.stream(shape.name, shape.sql, refresh_mode="differential") for shape in chosen]
    print(f"\n{family}: {[s.name for s in chosen]} of {len(shapes(family))} shapes ({rotation.where()})")
    try:
        run_cycles(env, streams, SMOKE_BATCHES)
    finally:
        env.reads.close()
    # Every refresh after a source change did work differentially; the build reported full.
    for stream in streams:
        assert [r.mode for r in stream.results] == ["full"] + ["differential"] * len(SMOKE_BATCHES), stream.identifier


def _family_example(spark, family, data, initial=None, batch=None, n_batches=3, max_shapes=3):
    """One hypothesis example: fresh sources, up to max_shapes shapes of the family, n_batches cycles."""
    fam = data.draw(
        st.lists(st.sampled_from(shapes(family)), min_size=1, max_size=max_shapes, unique_by=lambda s: s.name),
        label="shapes",
    )
    tables = sorted({t for s in shapes(family) for t in s.tables})
    env = StreamEnv(spark, tag=family[:8])
    initial = initial or gen.initial_rows()
    batch = batch or gen.change_batch(tables)
    _sources(env, tables, lambda t: data.draw(initial, label=f"initial {t}"))
    batches = [data.draw(batch, label=f"batch {i + 1}") for i in range(n_batches)]
    streams = [env.stream(s.name, s.sql, refresh_mode="differential") for s in fam]
    try:
        run_cycles(env, streams, batches)
    finally:
        env.reads.close()


@pytest.mark.parametrize("family", FAMILIES)
@given(data=st.data())
@gen.dvm_settings(gen.examples(4))
def test_family_random_changes(spark, family, data):
    _family_example(spark, family, data)


# --- special data -----------------------------------------------------------------------------


@st.composite
def _null_heavy_row(draw):
    r = {c: None for c in S.VALUE_COLUMNS}
    # Mostly NULL: at most one or two columns set.
    for c in draw(st.lists(st.sampled_from(S.VALUE_COLUMNS), max_size=2, unique=True)):
        r[c] = draw(gen.NON_NULL_VALUES[c])
    r["id"] = None
    return r


@st.composite
def _dup_heavy_rows(draw, min_size=0, max_size=24):
    """Few distinct rows, many exact copies (same id too)."""
    distinct = draw(st.lists(gen.source_rows(), min_size=1, max_size=3))
    out = []
    for i, r in enumerate(distinct, start=1):
        r = dict(r, id=i)
        out.extend(dict(r) for _ in range(draw(st.integers(1, 6))))
    return out[:max_size]


@st.composite
def _null_heavy_initial(draw):
    rows = draw(st.lists(_null_heavy_row(), max_size=12))
    return [dict(r, id=i) for i, r in enumerate(rows, start=1)]


def _null_heavy_batch(tables):
    return st.lists(
        st.one_of(
            st.builds(S.Insert, st.sampled_from(tables), st.lists(_null_heavy_row(), min_size=1, max_size=4)),
            st.builds(
                S.UpdateRows,
                st.sampled_from(tables),
                st.lists(st.integers(0, 99), min_size=1, max_size=3),
                st.sampled_from([{"k": None}, {"v": None}, {"g": None, "x": None}, {"d": None, "dt": None}]),
            ),
            st.builds(S.DeleteWhere, st.sampled_from(tables), st.just("k"), st.none()),
            gen.change_op(tables),
        ),
        min_size=1,
        max_size=5,
    )


def _dup_heavy_batch(tables):
    return st.lists(
        st.one_of(
            st.builds(
                S.InsertDuplicates, st.sampled_from(tables), st.lists(st.integers(0, 99), min_size=1, max_size=4)
            ),
            st.builds(S.DeleteRows, st.sampled_from(tables), st.lists(st.integers(0, 99), min_size=1, max_size=2)),
            gen.change_op(tables),
        ),
        min_size=1,
        max_size=5,
    )


@pytest.mark.parametrize("family", ["aggregate", "setop", "join", "outer", "semi", "sublink"])
@given(data=st.data())
@gen.dvm_settings(gen.examples(3))
def test_null_heavy_data(spark, family, data):
    tables = sorted({t for s in shapes(family) for t in s.tables})
    with _every_source_large():
        _family_example(spark, family, data, initial=_null_heavy_initial(), batch=_null_heavy_batch(tables))


@pytest.mark.parametrize("family", ["aggregate", "setop", "project", "outer", "semi", "recursive"])
@given(data=st.data())
@gen.dvm_settings(gen.examples(3))
def test_duplicate_heavy_data(spark, family, data):
    tables = sorted({t for s in shapes(family) for t in s.tables})
    with _every_source_large():
        _family_example(spark, family, data, initial=_dup_heavy_rows(), batch=_dup_heavy_batch(tables))


def _every_source_large():
    """The test sources are far below the session's broadcast threshold; taken as large (as
    under a threshold of -1), a semi, anti or left join's delta that cannot read its right input keyed narrows it by a semi join with
    the change's keys (key_restricted._matchable), the path large sources take. The smoke and
    random tests keep the small sources' path."""
    return mock.patch.object(embedded_bindings.Bindings, "broadcast_bytes", lambda self: -1)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
@given(data=st.data())
@gen.dvm_settings(gen.slow_examples(40))
def test_family_random_changes_long(spark, family, data):
    _family_example(spark, family, data, n_batches=5, max_shapes=len(shapes(family)))
