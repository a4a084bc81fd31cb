"""Session settings held while a block runs, on a session dbt's threads share.

The first block to hold a setting records the session's own value and raises it; the last one
to leave restores it. A block in between sees the raised value, which costs it nothing. Callers
pass one fixed value per setting, so every holder agrees on it. The refresh's own settings
(runtime/refresh/scan_settings.py) and the connections' file listings (connections/base.py,
LISTING_THRESHOLD) use this.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Callable, ContextManager, Iterator, Optional

from python_helpers.runtime.connections.base import (
    DRIVER_LISTED_FILES,
    LISTING_THRESHOLD,
    Connection,
    listed_in_driver,
)

_LOCK = threading.Lock()


@dataclass
class _Held:
    own: Optional[str]  # the session's value before the first holder raised it (None: unset)
    raised: bool  # False when the session's value was high enough already
    holders: int = 0  # blocks holding it now


_HELD: dict[tuple, _Held] = {}  # (session, setting) -> _Held


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
    slot = (conn.settings_key, key)
    with _LOCK:
        held = _HELD.get(slot)
        if held is None:
            own = conn.conf(key, None)
            high_enough = enough(own)
            if not high_enough:
                conn.set_conf(key, value)
            held = _HELD[slot] = _Held(own, raised=not high_enough)
        held.holders += 1
    try:
        yield
    finally:
        with _LOCK:
            held = _HELD[slot]
            held.holders -= 1
            if held.holders == 0:
                del _HELD[slot]
                if held.raised:
                    conn.set_conf(key, held.own)  # None: unset, back to Spark's default


def listing_in_driver(conn: Connection, files: list[str]) -> ContextManager:
    """While the block runs, Spark lists a read of `files` in the driver where that is the
    cheaper way (connections/base.py, listed_in_driver); else nothing is set."""
    if listed_in_driver(files):
        return at_least(conn, LISTING_THRESHOLD, DRIVER_LISTED_FILES)
    return contextlib.nullcontext()
