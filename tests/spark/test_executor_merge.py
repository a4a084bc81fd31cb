"""The embedded engine's differential refresh applied by the executors (large stored results):
the touched files rewritten by Spark, remove + add committed by the dbt process.

Real refreshes on real Delta tables, every one compared with the recompute; the threshold is
lowered so these small results take the path a 60 M-row result takes.
"""

from __future__ import annotations

import os

import pytest

from python_helpers.runtime.api import refresh_stream_table
from python_helpers.runtime.delta.embedded import executor_merge, storage, tables
from python_helpers.runtime.delta.locations import storage_path
from python_helpers.runtime.history import refresh_rows
from tests.support import sources as S
from tests.support.harness import run_cycles
from tests.support.shapes import INITIAL, SHAPES_BY_NAME, SMOKE_BATCHES

pytestmark = pytest.mark.spark

# One shape per kind of stored result: groups with hidden state, distinct rows with counts,
# an outer join (a bag with null-extended rows), a filtered bag whose names need quoting.
SHAPE_NAMES = ["agg_minmax", "distinct", "left_join", "syntax_case_and_quotes"]


@pytest.fixture
def by_executors(monkeypatch):
    calls = {"n": 0}
    real = executor_merge.merge

    def counted(*args, **kwargs):
        calls["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(executor_merge, "FROM_STORED_ROWS", 0)
    monkeypatch.setattr(executor_merge, "merge", counted)
    return calls


def _files(env, stream) -> list:
    table = tables.table_at(storage_path(env.spark, env.target, stream.identifier))
    return tables.add_actions(table).column("path").to_pylist()


def _records(table) -> list:
    return tables.add_actions(table).column("num_records").to_pylist()


def test_shapes_refreshed_by_the_executors_equal_the_recompute(env, by_executors):
    for t in ("t1", "t2", "t3"):
        env.source(t, INITIAL[t])
    streams = [env.stream(n, SHAPES_BY_NAME[n].sql) for n in SHAPE_NAMES]
    run_cycles(env, streams, SMOKE_BATCHES)
    assert by_executors["n"] > 0
    # Every differential refresh that had rows to apply replaced files, never by delta-rs' MERGE.
    for stream in streams:
        assert all(p.startswith(("full-", executor_merge.DIRECTORY_PREFIX)) for p in _files(env, stream)), stream


def test_keyed_results_refreshed_by_the_executors_equal_the_recompute(env, by_executors):
    """A keyed result (a fact's layout: the query's columns alone) meets its stored rows by the
    key's columns in Spark, NULL with NULL (a t1 row no t2 row matches)."""
    from tests.spark.test_unique_key import BATCHES, SHAPES, T1, T2

    env.source("t1", T1)
    env.source("t2", T2)
    names = ("keyed_fact", "keyed_nullable")
    streams = [env.stream(n, SHAPES[n][0], unique_key=SHAPES[n][1]) for n in names]
    run_cycles(env, streams, BATCHES)
    assert by_executors["n"] > 0
    for stream in streams:
        assert [r.mode for r in stream.results] == ["full"] + ["differential"] * len(BATCHES), stream.identifier
        assert all(p.startswith(("full-", executor_merge.DIRECTORY_PREFIX)) for p in _files(env, stream)), stream


def test_counts_of_an_executor_merge(env, by_executors):
    env.source("t", [S.row(i, k=i, v=i) for i in range(1, 7)])
    stream = env.stream("groups", "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM {src}.t GROUP BY k")
    stream.refresh(expect="full")
    before = _files(env, stream)
    env.apply([S.UpdateRows("t", [1], {"v": 40}), S.DeleteRows("t", [2]), S.Insert("t", [S.row(9, k=9, v=9)])])
    result = stream.refresh(expect="differential")
    stream.check()
    counters = result.counters
    assert (counters["rows_inserted"], counters["rows_updated"], counters["rows_deleted"]) == (1, 1, 1)
    assert counters["merged_by_executors"] == 1 and counters["files_rewritten"] >= 1
    after = _files(env, stream)
    assert set(before) - set(after), "the touched file is replaced"
    assert any(p.startswith(executor_merge.DIRECTORY_PREFIX) for p in after)
    # delta-rs records no metrics for a commit the dbt process assembles: the history takes
    # the counts from its metadata, for the build as for the merge.
    commits = storage.refresh_commits(storage_path(env.spark, env.target, stream.identifier))
    rows = refresh_rows(env.target, stream.identifier, commits)
    assert rows[0]["rows_written"] == 6 and rows[0]["files_added"] >= 1, rows[0]
    merged = (rows[1]["rows_inserted"], rows[1]["rows_updated"], rows[1]["rows_deleted"], rows[1]["files_removed"])
    assert merged == (1, 1, 1, counters["files_rewritten"]), rows[1]
    # Its new files hold the touched files' rows less the deleted group, plus the new one.
    new = [p for p in after if p.startswith(executor_merge.DIRECTORY_PREFIX)]
    stored = tables.table_at(storage_path(env.spark, env.target, stream.identifier))
    in_new = sum(n for p, n in zip(tables.add_actions(stored).column("path").to_pylist(), _records(stored)) if p in new)
    assert (rows[1]["files_added"], rows[1]["rows_written"]) == (len(new), in_new), rows[1]


def test_a_stream_table_over_one_refreshed_by_the_executors(env, by_executors):
    """The upstream's commits carry no change files: the downstream reads the touched files
    whole, as deletes and inserts, and still equals its recompute."""
    for t in ("t1", "t2", "t3"):
        env.source(t, INITIAL[t])
    upstream = env.stream("up", "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM {src}.t1 GROUP BY k")
    down = env.stream(
        "down",
        f"SELECT n, COUNT(*) AS groups, SUM(s) AS total FROM {env.target}.up GROUP BY n",
        oracle_sql="SELECT n, COUNT(*) AS groups, SUM(s) AS total FROM "
        "(SELECT k, COUNT(*) AS n, SUM(v) AS s FROM {src}.t1 GROUP BY k) u GROUP BY n",
    )
    upstream.refresh(expect="full")
    down.refresh(expect="full")
    for batch in SMOKE_BATCHES:
        env.apply(batch)
        upstream.refresh(expect="differential")
        upstream.check()
        down.refresh(expect="differential")
        down.check()
    assert by_executors["n"] >= len(SMOKE_BATCHES)


def test_a_rival_commit_makes_the_executor_merge_start_over(env, by_executors, monkeypatch):
    """A refresh that committed while ours was rewriting wins; ours commits nothing, removes
    its files and starts over on the new version, each change applied once."""
    env.source("t", [S.row(i, k=i % 3, v=i) for i in range(1, 10)])
    stream = env.stream("totals", "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM {src}.t GROUP BY k")
    stream.refresh(expect="full")
    env.apply([S.UpdateRows("t", [1, 2], {"v": 40})])
    real_commit = storage.commit_rewrite
    raced = {"n": 0}

    def rival_first(*args, **kwargs):
        if raced["n"] == 0:
            raced["n"] += 1
            with monkeypatch.context() as inner:
                inner.setattr(storage, "commit_rewrite", real_commit)
                env.apply([S.Insert("t", [S.row(None, k=1, v=100)])])
                from python_helpers.runtime.refresh import run as refresh_module

                refresh_module.plan_request.inside = True
                try:
                    refresh_stream_table(env.spark, stream.request(), log=lambda *_: None)
                finally:
                    refresh_module.plan_request.inside = False
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(storage, "commit_rewrite", rival_first)
    said: list = []
    result = refresh_stream_table(env.spark, stream.request(), log=lambda level, text: said.append(text))
    assert raced["n"] == 1 and result.mode == "differential"
    assert any("another refresh committed to the stored result first" in t for t in said), said
    stream.check()
    target = storage_path(env.spark, env.target, stream.identifier)
    live = {p.split("/")[0] for p in _files(env, stream)}
    on_disk = {d for d in os.listdir(target) if d.startswith(executor_merge.DIRECTORY_PREFIX)}
    assert on_disk <= live, "the loser's files were removed"


class Crash(RuntimeError):
    pass


def test_a_refresh_that_dies_before_its_commit_leaves_the_stored_result_as_it_was(env, by_executors, monkeypatch):
    """The executors wrote the new files, the commit failed: the stored rows and offsets are the
    old ones, the files stay named by no commit (a failure other than a rival's may come after
    the log named them: the vacuum removes them), and the next refresh applies the change once."""
    env.source("t", [S.row(i, k=i % 3, v=i) for i in range(1, 10)])
    stream = env.stream("totals", "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM {src}.t GROUP BY k")
    stream.refresh(expect="full")
    target = storage_path(env.spark, env.target, stream.identifier)
    before = storage.read_metadata(target)
    rows_before = sorted(env.spark.table(stream.view).collect())
    env.apply([S.Insert("t", [S.row(None, k=1, v=50)]), S.DeleteRows("t", [0, 1])])

    def dies(*args, **kwargs):
        raise Crash("the process died before the storage commit")

    with monkeypatch.context() as patch:
        patch.setattr(storage, "commit_rewrite", dies)
        with pytest.raises(Crash):
            stream.refresh()
    after = storage.read_metadata(target)
    assert (after["offsets"], after["storage_version"]) == (before["offsets"], before["storage_version"])
    left = {d for d in os.listdir(target) if d.startswith(executor_merge.DIRECTORY_PREFIX)}
    assert not left & {p.split("/")[0] for p in _files(env, stream)}, "a failed commit's files are named"
    assert sorted(env.spark.table(stream.view).collect()) == rows_before
    stream.refresh(expect="differential")
    stream.check()
