"""A refresh is applied exactly once: interrupted before its commit, or overtaken by another.

Both tests run real refreshes on real Delta tables; the interruption is injected at the one
place a crash matters (just before the storage commit), and the concurrent refresh is a real
second refresh that commits while the first is between reading and committing.
"""

import pytest

from python_helpers.errors import ConcurrentRefresh
from python_helpers.runtime.api import refresh_stream_table
from python_helpers.runtime.delta.embedded import storage
from tests.support import sources as S

pytestmark = pytest.mark.spark

SQL = "select k, count(*) as n, sum(v) as total, min(v) as lo from {src}.t group by k"
ROWS = [S.row(i, k=i % 3, v=i) for i in range(1, 10)]


class Crash(RuntimeError):
    pass


def _crash(*args, **kwargs):
    raise Crash("process died before the storage commit")


def test_refresh_interrupted_before_commit_is_redone_once(env, monkeypatch):
    env.source("t", ROWS)
    stream = env.stream("totals", SQL)
    stream.refresh(expect="full")
    before = storage.read_metadata(stream_path(env, stream))

    env.apply([S.Insert("t", [S.row(None, k=1, v=50), S.row(None, k=7, v=-3)]), S.DeleteRows("t", [0, 1])])
    with monkeypatch.context() as patch:
        patch.setattr(storage, "merge_rows", _crash)
        with pytest.raises(Crash):
            stream.refresh()
    after_crash = storage.read_metadata(stream_path(env, stream))
    assert after_crash["offsets"] == before["offsets"]  # nothing committed, offsets unchanged
    assert after_crash["storage_version"] == before["storage_version"]

    result = stream.refresh(expect="differential")
    assert result.rows_changed > 0
    stream.check()  # the changes are applied exactly once
    assert stream.refresh(expect="differential").skipped


def _race(env, stream, monkeypatch, times: int):
    """Make a rival refresh of the same stream table commit while ours is between reading and
    committing, the first `times` times ours gets there (each rival first changes the source,
    so it always has something to commit)."""
    real_merge = storage.merge_rows
    state = {"raced": 0}

    def merge_after_a_rival(*args, **kwargs):
        if state["raced"] < times:
            state["raced"] += 1
            with monkeypatch.context() as inner:
                inner.setattr(storage, "merge_rows", real_merge)
                env.apply([S.Insert("t", [S.row(None, k=state["raced"], v=100 + state["raced"])])])
                from python_helpers.runtime.refresh import run as refresh_module

                planner = refresh_module.plan_request
                planner.inside = True
                try:
                    refresh_stream_table(env.spark, stream.request(), log=lambda *_: None)
                finally:
                    planner.inside = False
        return real_merge(*args, **kwargs)

    monkeypatch.setattr(storage, "merge_rows", merge_after_a_rival)
    return state


def test_concurrent_refresh_starts_over_after_the_rival_and_loses_nothing(env, monkeypatch):
    env.source("t", ROWS)
    stream = env.stream("totals", SQL)
    stream.refresh(expect="full")
    env.apply([S.UpdateRows("t", [1, 2], {"v": 40})])
    _race(env, stream, monkeypatch, times=1)
    said = []
    result = refresh_stream_table(env.spark, stream.request(), log=lambda level, text: said.append(text))
    assert result.mode == "differential"
    assert any("another refresh committed to the stored result first" in t and "starting over" in t for t in said), said
    stream.check()  # the rival's change and ours, each applied once
    assert stream.refresh(expect="differential").skipped


def test_refresh_overtaken_every_time_gives_up_with_a_clear_message(env, monkeypatch):
    from python_helpers.runtime.refresh import run as refresh_module

    env.source("t", ROWS)
    stream = env.stream("totals", SQL)
    stream.refresh(expect="full")
    _race(env, stream, monkeypatch, times=10)
    # Each of our attempts finds a new change (so it always has something to commit) and is
    # overtaken by a rival before its commit.
    real_plan = refresh_module.plan_request
    attempts = {"n": 0}

    def plan_with_a_new_change(spark, request):
        if not getattr(plan_with_a_new_change, "inside", False):
            attempts["n"] += 1
            env.apply([S.UpdateRows("t", [attempts["n"]], {"v": 40 + attempts["n"]})])
        return real_plan(spark, request)

    monkeypatch.setattr(refresh_module, "plan_request", plan_with_a_new_change)
    with pytest.raises(ConcurrentRefresh, match="nothing was applied") as caught:
        refresh_stream_table(env.spark, stream.request(), log=lambda *_: None)
    assert stream.model in str(caught.value) and "run the refresh again" in str(caught.value)
    monkeypatch.undo()
    stream.check()  # every rival's refresh counted once; the loser changed nothing
    stream.refresh(expect="differential")
    stream.check()


def stream_path(env, stream):
    from python_helpers.runtime.delta.locations import storage_path

    return storage_path(env.spark, env.target, stream.identifier)
