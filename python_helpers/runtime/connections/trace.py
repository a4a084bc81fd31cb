"""Every call a refresh makes to Spark, timed: where a refresh's fixed cost goes.

Off by default. DBT_SPARK_STREAM_TRACE=<file> appends one JSON line per call (the model, the
connection method, its seconds, the statement's first characters: 400, or as many as
DBT_SPARK_STREAM_TRACE_CHARS says) to that file; the benchmarks turn it on to count statements
per refresh and to name the slowest ones. Through `dbt run` it is the only way to see the
statements of a fresh process, whose first Delta reads pay the JVM's warm-up.
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
TEXT_CHARS = int(os.environ.get("DBT_SPARK_STREAM_TRACE_CHARS", "400"))

_lock = threading.Lock()


class TracedConnection:
    """A connection whose calls to Spark are written to the trace file."""

    def __init__(self, inner: Connection, model: str, path: str):
        self._inner, self._model, self._path = inner, model, path

    def private(self) -> Connection:
        return traced_by(self._inner.private(), self._model, self._path)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name not in TIMED or not callable(value):
            return value
        return self._timed(name, value)

    def _timed(self, name: str, call: Callable) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self._write(name, args, time.perf_counter() - started)

        return timed

    def _write(self, method: str, args: tuple, seconds: float) -> None:
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


def traced_by(conn: Connection, model: str, path: str) -> Connection:
    return cast(Connection, TracedConnection(conn, model, path))


def traced(conn: Connection, model: str) -> Connection:
    """`conn`, traced when DBT_SPARK_STREAM_TRACE names a file."""
    path: Optional[str] = os.environ.get(TRACE)
    return traced_by(conn, model, path) if path else conn
