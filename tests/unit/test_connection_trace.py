"""runtime/connections/trace.py: the statements a refresh sends counted always (its history's
`spark_statements`); with DBT_SPARK_STREAM_TRACE each call to Spark timed in a file, the call's
answer or error unchanged, nothing written when it is off."""

from __future__ import annotations

import json

import pytest

from python_helpers.runtime.connections import trace


class _Spark:
    """A connection's surface: two calls that reach Spark, one that fails, one that does not reach it."""

    kind = "session"

    def rows(self, sql: str) -> list:
        return [(1,)]

    def execute(self, sql: str) -> None:
        raise RuntimeError("no such table")

    def conf(self, key: str) -> str:
        return "v"

    def view_of_arrow(self, name: str, rows) -> None:
        pass

    def drop_view(self, name: str) -> None:
        pass

    def private(self) -> "_Spark":
        return _Spark()

    def release(self) -> None:
        pass


def test_each_call_is_written_with_its_model_method_and_statement(tmp_path, monkeypatch):
    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv(trace.TRACE, str(path))
    conn = trace.traced(_Spark(), "model.p.facts")  # type: ignore[arg-type]
    assert conn.rows("SELECT  1\n FROM t") == [(1,)]
    with pytest.raises(RuntimeError, match="no such table"):
        conn.private().execute("DROP VIEW v")
    conn.release()  # not a call to Spark: not written
    assert conn.kind == "session"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(c["model"], c["method"], c["text"]) for c in lines] == [
        ("model.p.facts", "rows", "SELECT 1 FROM t"),
        ("model.p.facts", "execute", "DROP VIEW v"),
    ]
    assert all(c["seconds"] >= 0 for c in lines)
    assert trace.statements_sent(conn) == 2  # the failed statement was sent too


def test_off_by_default_statements_still_counted(tmp_path, monkeypatch):
    monkeypatch.delenv(trace.TRACE, raising=False)
    monkeypatch.chdir(tmp_path)
    conn = trace.traced(_Spark(), "m")  # type: ignore[arg-type]
    assert trace.statements_sent(conn) == 0
    conn.rows("SELECT 1")
    private = conn.private()
    private.rows("SELECT 2")  # a private connection (a refresh's thread) counts into the same tally
    with pytest.raises(RuntimeError):
        private.execute("DROP VIEW v")
    conn.release()  # not a call to Spark
    # Calls to Spark that are not statements Spark analyses: a setting, a view of rows, a drop.
    assert conn.conf("k") == "v"
    conn.view_of_arrow("v", None)
    conn.drop_view("v")
    assert conn.kind == "session"
    assert trace.statements_sent(conn) == trace.statements_sent(private) == 3
    assert list(tmp_path.iterdir()) == []  # nothing written
    assert trace.statements_sent(_Spark()) == 0  # type: ignore[arg-type]  # a connection never counted
