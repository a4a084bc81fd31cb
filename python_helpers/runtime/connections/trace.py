"""A refresh's statements counted, and every call it makes to Spark timed on request: where a
refresh's fixed cost goes.

Counted always: the statements a refresh has Spark analyse (STATEMENTS), for its history row
and adapter_response (`spark_statements`). A count, not a measure of round trips: over Thrift
some calls left out are statements too (a view of rows, a setting, a drop), and one view over
several directories is several.

Timed off by default: DBT_SPARK_STREAM_TRACE=<file> appends one JSON line per call (the model,
the connection method, its seconds, the statement's first characters: 400, or as many as
DBT_SPARK_STREAM_TRACE_CHARS says) to that file; the benchmarks turn it on to name the slowest
calls. Through `dbt run` it is the only way to see the statements of a fresh process, whose
first Delta reads pay the JVM's warm-up.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Callable, Optional, cast

from python_helpers.runtime.connections.base import Connection

TRACE = "DBT_SPARK_STREAM_TRACE"

# The methods that reach Spark; the rest (key, kind, release) are passed through untimed.
TIMED = frozenset(
    {
        "execute",
        "rows",
        "records",
        "arrow",
        "output_columns",
        "view_of_arrow",
        "view_of_files",
        "view_of_query",
        "drop_view",
        "table_exists",
        "table_type",
        "conf",
        "setting",
        "settings",
        "set_conf",
        "spark_version",
        "explicit_confs",
        "classify_function",
        "add_tag",
        "remove_tag",
    }
)
# The calls that have Spark analyse a statement every time: SQL run, a result read, a query's
# columns, a view over files or over a query. Not counted: settings read or set (some held by
# the connection), catalog lookups, function lookups, job tags, views of rows sent from the dbt
# process (over Spark Connect they travel inside the statements that read them) and every
# view's drop.
STATEMENTS = frozenset({"execute", "rows", "records", "arrow", "output_columns", "view_of_files", "view_of_query"})
TEXT_CHARS = int(os.environ.get("DBT_SPARK_STREAM_TRACE_CHARS", "400"))

_lock = threading.Lock()


class Tally:
    """Statements sent, shared by a connection and its private ones (a refresh's threads)."""

    def __init__(self) -> None:
        self.statements = 0
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self.statements += 1


class TracedConnection:
    """A connection whose statements are counted, and whose calls to Spark are written to the
    trace file when there is one."""

    def __init__(self, inner: Connection, model: str, path: Optional[str], tally: Optional[Tally] = None):
        self._inner, self._model, self._path = inner, model, path
        self.tally = tally or Tally()

    def private(self) -> Connection:
        return cast(Connection, TracedConnection(self._inner.private(), self._model, self._path, self.tally))

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not callable(value) or (name not in STATEMENTS and (self._path is None or name not in TIMED)):
            return value
        return self._timed(name, value)

    def _timed(self, name: str, call: Callable) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if name in STATEMENTS:
                self.tally.add()
            if self._path is None:
                return call(*args, **kwargs)
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self._write(name, args, time.perf_counter() - started)

        return timed

    def _write(self, method: str, args: tuple, seconds: float) -> None:
        assert self._path is not None
        text = " | ".join(a for a in args if isinstance(a, str))  # a view's name, then its query
        line = {
            "model": self._model,
            "method": method,
            "seconds": round(seconds, 4),
            "at": round(time.time(), 3),
            "text": " ".join(text.split())[:TEXT_CHARS],
        }
        try:
            with _lock, open(self._path, "a", encoding="utf-8") as out:
                out.write(json.dumps(line) + "\n")
        except OSError:  # a trace never fails a refresh
            pass


def traced(conn: Connection, model: str) -> Connection:
    """`conn` with its statements counted (statements_sent), and traced when
    DBT_SPARK_STREAM_TRACE names a file."""
    return cast(Connection, TracedConnection(conn, model, os.environ.get(TRACE) or None))


def statements_sent(conn: Connection) -> int:
    """The statements sent so far through `conn` (made by `traced`) and its private connections;
    0 for a connection that was not."""
    tally = getattr(conn, "tally", None)
    return tally.statements if isinstance(tally, Tally) else 0
