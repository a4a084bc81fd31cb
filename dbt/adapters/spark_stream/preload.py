"""The refresh engine's modules loaded in the background while dbt opens its connection.

Importing the engine (sqlglot's dialects and the operator tree) takes about half a second of
Python. Loaded on demand, that lands inside the first stream table's execution time of every
`dbt run`; started when dbt opens a connection, it overlaps the waits on Spark there (a session's
JVM starting, a server's catalog round trips). Whoever needs the engine calls `wait()` first, so
no two threads import the same modules at once.
"""

from __future__ import annotations

import threading
from importlib import import_module
from typing import Optional

# The entry points the adapter calls; importing them loads the rest of the engine.
MODULES = ("python_helpers.runtime.api", "python_helpers.runtime.refresh.run", "python_helpers.runtime.history")

_lock = threading.Lock()
_thread: Optional[threading.Thread] = None


def start() -> None:
    """Start loading the engine once per process (later calls do nothing)."""
    global _thread
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_load, name="dbt-spark-stream-preload", daemon=True)
            _thread.start()


def wait() -> None:
    """Return once the background load (if any) has finished."""
    with _lock:
        thread = _thread
    if thread is not None:
        thread.join()


def _load() -> None:
    for name in MODULES:
        try:
            import_module(name)
        except Exception:  # noqa: BLE001 - the caller's own import reports a broken install
            return
