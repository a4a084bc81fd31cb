"""Session settings a refresh raises while its delta query runs (or sets while the executors
write its result), and puts back afterwards.

Only settings that change how Spark reads or encodes, never what a query returns
(runtime/refresh/settings.py lists those), belong here. They are held on the session dbt's
threads share (connections/held_settings.py): the first refresh to raise a setting records the
session's own value and the last one to finish restores it.

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
from typing import Iterator

from python_helpers.runtime.connections.base import NO_DICTIONARY_FILTER, Connection
from python_helpers.runtime.connections.held_settings import at_least, exactly

__all__ = ["IN_FILTER_THRESHOLD", "at_least", "exactly", "key_filtered"]

IN_FILTER_THRESHOLD = "spark.sql.parquet.pushdown.inFilterThreshold"


@contextlib.contextmanager
def key_filtered(conn: Connection, keys: int) -> Iterator[None]:
    """The settings of a query over key-restricted reads that list up to `keys` keys."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(at_least(conn, IN_FILTER_THRESHOLD, keys))
        for key, value in NO_DICTIONARY_FILTER.items():
            stack.enter_context(exactly(conn, key, value))
        yield
