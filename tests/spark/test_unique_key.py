"""unique_key: a bag result the model declares unique by some of its columns is stored one row
per key (dvm/stored_result.py, KeyedBagResult): built without grouping by every column, read
without repeating rows, refreshed without joining the stored rows. Against the oracle through
inserts, updates and deletes of keyed sources (ids stay unique), a property over drawn changes,
and the key breaking: a refresh that would give a key a second row fails naming the model and
the key, before anything is written.

Cost on this 2-core machine: about 100 s beside the other pytest worker (make test: the fact
shape and a rotating other one, one hypothesis example of up to two shapes).
"""

from __future__ import annotations

import pytest
from deltalake import DeltaTable
from hypothesis import given
from hypothesis import strategies as st

from python_helpers import errors as E
from python_helpers.runtime.delta.locations import storage_path
from tests.support import rotation, spies
from tests.support import sources as S
from tests.support import strategies as gen
from tests.support.harness import run_cycles
from tests.support.sources import row

pytestmark = pytest.mark.spark

# name -> (query, unique_key): t2.id is unique, so a join on it keeps t1's id unique (a fact
# joined to a dimension); a many-to-many join is unique by both sides' ids.
SHAPES = {
    "keyed_filter": ("SELECT id, k, g, v FROM {src}.t1 WHERE v > 0 OR v IS NULL", ["id"]),
    "keyed_fact": (
        "SELECT a.id, a.v, a.d, b.g AS b_g, b.x AS b_x FROM {src}.t1 a JOIN {src}.t2 b ON a.k = b.id",
        ["id"],
    ),
    "keyed_outer": ("SELECT a.id, a.dt, b.v AS b_v FROM {src}.t1 a LEFT JOIN {src}.t2 b ON a.k = b.id", ["ID"]),
    "keyed_pairs": (
        "SELECT a.id AS a_id, b.id AS b_id, a.v + b.v AS s FROM {src}.t1 a JOIN {src}.t2 b ON a.g = b.g",
        ["a_id", "b_id"],
    ),
    # A key holding NULL (a t1 row no t2 row matches): NULL meets NULL when a refresh finds the
    # stored row of such a key, as GROUP BY puts them together.
    "keyed_nullable": (
        "SELECT a.id AS a_id, b.id AS b_id, a.v FROM {src}.t1 a LEFT JOIN {src}.t2 b ON a.k = b.id",
        ["a_id", "b_id"],
    ),
    "keyed_union": (
        "SELECT id, v, 'a' AS side FROM {src}.t1 UNION ALL SELECT id, v, 'b' AS side FROM {src}.t2",
        ["side", "id"],
    ),
}

T1 = [
    row(1, 1, "a", 3, 1.5, "10.25", "2023-12-30"),
    row(2, 2, "b", -2, 2.0, "-3.10", "2024-01-02"),
    row(3, 1, "a", 5, 0.1, "7.00", "2024-01-15"),
    row(4, None, "c", None, None, None, None),
    row(5, 3, "b", 1, 1e3, "99999.99", "2023-12-31"),
    row(6, 9, "a", 0, -7.25, "0.00", "2024-02-29"),
]
T2 = [row(1, 0, "a", 4, 0.5, "1.00", None), row(2, 1, "b", -1, None, "2.50", "2024-01-01"), row(3, 2, None, 2, 3.0)]
BATCHES = [
    [S.Insert("t1", [row(None, 2, "c", 7), row(None, 3, "a", -4)]), S.UpdateRows("t2", [0], {"g": "c", "x": 9.5})],
    [S.UpdateRows("t1", [1, 2], {"k": 3, "v": 2}), S.DeleteRows("t2", [2]), S.DeleteRows("t1", [0])],
    [S.Insert("t2", [row(None, 5, "b", 3)]), S.UpdateWhere("t1", "g", "a", {"k": 4}), S.DeleteAll("t1")],
    [S.Insert("t1", [row(None, 1, "b", 2), row(None, 4, "a", None)])],
]


def _keyed(env, names=tuple(SHAPES)):
    return [env.stream(n, SHAPES[n][0], unique_key=list(SHAPES[n][1])) for n in names]


@pytest.mark.every_run  # a share of its shapes by the day
def test_keyed_results_stay_equal_to_recompute_through_changes(env):
    env.source("t1", T1)
    env.source("t2", T2)
    # The fact and the NULL key every day, the others in the day rotation (make test: one of four).
    daily = ["keyed_fact", "keyed_nullable"]
    names = daily + rotation.todays([n for n in SHAPES if n not in daily])
    print(f"\nshapes: {names} ({rotation.where()})")
    streams = _keyed(env, names)
    run_cycles(env, streams, BATCHES)
    for stream in streams:
        assert [r.mode for r in stream.results] == ["full"] + ["differential"] * len(BATCHES), stream.identifier
    # One stored row per key, shown once, and nothing stored beside the query's columns (what a
    # table model of the query writes): the stored table is the view's rows and columns.
    for stream in streams:
        stored = DeltaTable(_stored(env, stream)).to_pyarrow_table()
        view = env.spark.table(stream.view)
        assert stored.column_names == view.columns, stream.identifier
        assert stored.num_rows == view.count(), stream.identifier


def test_a_keyed_fact_with_its_stored_read_restricted_computes_its_delta_once(env, monkeypatch):
    """The restricted read of the stored row ids (touched_storage), which the suite's small
    tables would not reach, forced on: the delta, named twice by the MERGE rows' query, is
    computed once (delta_once materializes it) and the result equals the recompute."""
    from python_helpers.dvm import keyed_result
    from python_helpers.runtime.refresh import differential

    monkeypatch.setattr(differential, "RESTRICT_STORAGE_BYTES", 0)
    once = spies.replaced(monkeypatch, keyed_result, "delta_once")
    env.source("t1", T1)
    env.source("t2", T2)
    streams = _keyed(env, ["keyed_fact"])
    run_cycles(env, streams, BATCHES)
    assert [r.mode for r in streams[0].results] == ["full"] + ["differential"] * len(BATCHES)
    assert once and all(once), once


def _stored(env, stream) -> str:
    """The stored result's Delta table."""
    return storage_path(env.spark, env.target, stream.identifier)


@given(data=st.data())
@gen.dvm_settings(max_examples=gen.examples(2))
def test_keyed_results_under_drawn_changes(spark, data):
    from tests.support.harness import StreamEnv

    env = StreamEnv(spark, tag="ukey")
    names = data.draw(st.lists(st.sampled_from(sorted(SHAPES)), min_size=1, max_size=2, unique=True), label="shapes")
    for t in ("t1", "t2"):
        env.source(t, data.draw(gen.unique_rows(), label=f"initial {t}"))
    batch = gen.change_batch(["t1", "t2"], unique_ids=True)
    batches = [data.draw(batch, label=f"batch {i + 1}") for i in range(3)]
    try:
        run_cycles(env, _keyed(env, names), batches)
    finally:
        env.reads.close()


@pytest.mark.parametrize("restricted", [False, True], ids=["whole", "restricted"])
def test_a_change_that_gives_a_key_a_second_row_fails_before_anything_is_written(env, monkeypatch, restricted):
    """...also where the refresh reads only the stored row ids of keys that gain a tuple
    without losing one (touched_storage, forced on: the suite's tables are small)."""
    from python_helpers.runtime.refresh import differential

    if restricted:
        monkeypatch.setattr(differential, "RESTRICT_STORAGE_BYTES", 0)
    env.source("t1", T1)
    (stream,) = _keyed(env, ["keyed_filter"])
    stream.refresh(expect="full")
    stored_path = _stored(env, stream)
    version = DeltaTable(stored_path).version()
    # A new row under a key the stream table holds (id 1 again), then two new rows of one key.
    for rows in ([row(1, 0, "z", 1)], [row(40, 0, "y", 1), row(40, 1, "x", 2)]):
        env.apply([S.Insert("t1", rows)])
        with pytest.raises(E.UniqueKeyViolated) as info:
            stream.refresh()
        text = str(info.value)
        assert "unique_key (id) is not unique" in text and stream.model in text and "--full-refresh" in text, text
        assert DeltaTable(stored_path).version() == version, "nothing is committed"
        env.apply([S.DeleteRows("t1", [0])] if rows[0]["id"] == 1 else [S.DeleteWhere("t1", "id", 40)])
    # With the duplicates gone, the change is read as a whole and the key holds again (id 1's
    # rows are all gone: DeleteRows removes every row of the picked id).
    stream.refresh(expect="differential")
    stream.check()


def test_a_second_row_of_a_key_holding_null_fails_too(env):
    """t1's id 4 has no k, so its key is (4, NULL); another t1 row of id 4 and no k is a second
    row of that key, which the refresh must see (NULL meets NULL) and refuse."""
    env.source("t1", T1)
    env.source("t2", T2)
    (stream,) = _keyed(env, ["keyed_nullable"])
    stream.refresh(expect="full")
    version = DeltaTable(_stored(env, stream)).version()
    env.apply([S.Insert("t1", [row(4, None, "q", 1)])])
    with pytest.raises(E.UniqueKeyViolated) as info:
        stream.refresh()
    assert "unique_key (a_id, b_id) is not unique" in str(info.value), str(info.value)
    assert DeltaTable(_stored(env, stream)).version() == version, "nothing is committed"


def test_a_stream_table_over_a_keyed_one_reads_its_change_feed(env):
    """A keyed upstream stores the query's columns alone (no count to repeat rows by): a
    downstream aggregate over it reads its change feed as plain rows and equals its recompute."""
    env.source("t1", T1)
    env.source("t2", T2)
    sql, key = SHAPES["keyed_nullable"]
    upstream = env.stream("keyed_up", sql, unique_key=key)
    down = env.stream(
        "keyed_down",
        f"SELECT b_id, COUNT(*) AS n, SUM(v) AS v FROM {env.target}.keyed_up GROUP BY b_id",
        oracle_sql=f"SELECT b_id, COUNT(*) AS n, SUM(v) AS v FROM ({sql}) u GROUP BY b_id",
    )
    upstream.refresh(expect="full")
    down.refresh(expect="full")
    for batch in BATCHES:
        env.apply(batch)
        upstream.refresh(expect="differential")
        down.refresh(expect="differential")
        down.check()


def test_unique_key_naming_no_column_of_the_query_is_refused(env):
    env.source("t1", T1)
    stream = env.stream("keyed_bad", SHAPES["keyed_filter"][0], unique_key=["id", "nope"])
    with pytest.raises(E.InvalidConfig) as info:
        stream.refresh()
    assert "nope" in str(info.value) and stream.model in str(info.value)
    with pytest.raises(E.InvalidConfig):
        env.stream("keyed_bad2", SHAPES["keyed_filter"][0], unique_key=[""]).refresh()


def test_declaring_a_unique_key_rebuilds_once_then_refreshes_differentially(env):
    env.source("t1", T1)
    sql = SHAPES["keyed_filter"][0]
    stream = env.stream("keyed_later", sql)
    stream.refresh(expect="full")
    stream.refresh(expect="differential")  # nothing moved
    result = stream.refresh(expect="full", unique_key=["id"])
    assert "config" in (result.reason or ""), result.reason
    env.apply([S.UpdateRows("t1", [2], {"v": 4}), S.Insert("t1", [row(None, 1, "q", 8)])])
    stream.refresh(expect="differential", unique_key=["id"])
    stream.check()
