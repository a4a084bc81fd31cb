"""Session settings a refresh raises while its delta query runs (or sets while the executors
write its result), and puts back afterwards.

Only settings that change how Spark reads or encodes, never what a query returns
(runtime/refresh/settings.py lists those), belong here. They are set on the session dbt's
threads share, so the first refresh to raise a setting records the session's own value and the
last one to finish restores it; a refresh in between sees the raised value, which costs it
nothing.

`spark.sql.parquet.outputTimestampType` (default INT96): a full refresh of the embedded engine
commits the parquet files the executors wrote (delta/embedded/executor_writes.py); written as
INT96, a timestamp reads back as a nanosecond timestamp without time zone.

`spark.sql.parquet.pushdown.inFilterThreshold` (default 10): an `IN` list longer than this
reaches the Parquet reader only as its [min, max]. A key-restricted read of a join input
(binding.Bindings.keyed_snapshot) lists up to PAGE_FILTER_KEYS keys, and Parquet can then skip
every page whose column index holds none of them: a few hundred scattered keys read a few
hundred pages of a table instead of all of it.

`parquet.filter.dictionary.enabled` (default true), off while a key-restricted read of the
spark engine runs (`key_filtered`): with the longer lists Parquet would also test each key
against every row group's dictionary, which costs seconds where a key column's dictionary is
large and skips nothing (connections/base.py, NO_DICTIONARY_FILTER). Spark hands a session's
settings to the Parquet reader; the embedded engine's file reads carry the setting as a read
option instead, so its refreshes do not set it.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from python_helpers.runtime.connections.base import NO_DICTIONARY_FILTER, Connection

IN_FILTER_THRESHOLD = "spark.sql.parquet.pushdown.inFilterThreshold"

_LOCK = threading.Lock()


@dataclass
class _Held:
    own: Optional[str]  # the session's value before the first refresh raised it (None: unset)
    raised: bool  # False when the session's value was high enough already
    refreshes: int = 0  # refreshes inside the block now


_HELD: dict[tuple, _Held] = {}  # (session, setting) -> _Held


@contextlib.contextmanager
def key_filtered(conn: Connection, keys: int) -> Iterator[None]:
    """The settings of a query over key-restricted reads that list up to `keys` keys."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(at_least(conn, IN_FILTER_THRESHOLD, keys))
        for key, value in NO_DICTIONARY_FILTER.items():
            stack.enter_context(exactly(conn, key, value))
        yield


@contextlib.contextmanager
def at_least(conn: Connection, key: str, value: int) -> Iterator[None]:
    """While the block runs, the integer setting `key` is at least `value` (callers pass one
    fixed value per setting)."""

    def enough(own: Optional[str]) -> bool:
        try:
            return own is not None and int(own) >= value
        except ValueError:
            return False

    with _holding(conn, key, str(value), enough):
        yield


@contextlib.contextmanager
def exactly(conn: Connection, key: str, value: str) -> Iterator[None]:
    """While the block runs, the setting `key` is `value` (callers pass one fixed value per
    setting)."""
    with _holding(conn, key, value, lambda own: own is not None and own.upper() == value.upper()):
        yield


@contextlib.contextmanager
def _holding(conn: Connection, key: str, value: str, enough: Callable[[Optional[str]], bool]) -> Iterator[None]:
    slot = (conn.key, key)
    with _LOCK:
        held = _HELD.get(slot)
        if held is None:
            own = conn.conf(key, None)
            high_enough = enough(own)
            if not high_enough:
                conn.set_conf(key, value)
            held = _HELD[slot] = _Held(own, raised=not high_enough)
        held.refreshes += 1
    try:
        yield
    finally:
        with _LOCK:
            held = _HELD[slot]
            held.refreshes -= 1
            if held.refreshes == 0:
                del _HELD[slot]
                if held.raised:
                    conn.set_conf(key, held.own)  # None: unset, back to Spark's default
