"""A refresh is applied exactly once: interrupted before its commit, or overtaken by another.

Both tests run real refreshes on real Delta tables; the interruption is injected at the one
place a crash matters (just before the storage commit), and the concurrent refresh is a real
second refresh that commits while the first is between reading and committing.
"""
import pytest

from python_helpers.errors import ConcurrentRefresh
from python_helpers.runtime import storage
from python_helpers.runtime.api import refresh_stream_table
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


def test_concurrent_refresh_fails_the_later_commit_and_loses_nothing(env, monkeypatch):
    env.source("t", ROWS)
    stream = env.stream("totals", SQL)
    stream.refresh(expect="full")
    env.apply([S.UpdateRows("t", [1, 2], {"v": 40})])

    real_merge = storage.merge_rows
    state = {"raced": False}

    def merge_after_a_rival(*args, **kwargs):
        # Another refresh of the same table runs to completion first.
        if not state["raced"]:
            state["raced"] = True
            with monkeypatch.context() as inner:
                inner.setattr(storage, "merge_rows", real_merge)
                refresh_stream_table(env.spark, stream.request())
        return real_merge(*args, **kwargs)

    monkeypatch.setattr(storage, "merge_rows", merge_after_a_rival)
    with pytest.raises(ConcurrentRefresh, match="nothing was applied"):
        stream.refresh()
    monkeypatch.setattr(storage, "merge_rows", real_merge)
    stream.check()  # the rival's refresh is the one that counts, applied once
    assert stream.refresh(expect="differential").skipped


def stream_path(env, stream):
    from python_helpers.runtime.sources import storage_path

    return storage_path(env.spark, env.target, stream.identifier)
