"""Repetitions taken in a rotation by the day, so make test fits CI's budget and still covers
everything over a few days.

With DVM_ROTATION=k a run takes the items whose index i has i % k == DAY % k (DAY: days since
0001-01-01, or DVM_DAY), so every item runs at least once in any k consecutive days, and a
failure names the day to repeat: `DVM_DAY=<day> DVM_ROTATION=<k> pytest ...`. k=1 (the default,
make test-long) takes everything. Used for kill points, smoke shapes of a family, the spark
engine's shapes and the cluster's connection methods.

Tests themselves take a share too: with DVM_SHARE=n a run keeps the tests marked `every_run`
(and the folders of EVERY_RUN) and about an n-th of the others, a different n-th each hour
(TURN: hours since 1970, or DVM_TURN), so any n runs in n consecutive hours hold every test
between them. The unit is a module marked `share_module`, a test class (its methods share a dbt
project) or else one test item. n=1 (the default, make test-long) keeps everything, as does a
run given test ids or -k; `share_line()` says how to repeat a run's share.
"""

from __future__ import annotations

import datetime
import os
import time
import zlib
from typing import Callable, Optional, Sequence, TypeVar

T = TypeVar("T")

ROTATION = max(1, int(os.environ.get("DVM_ROTATION", "1")))
DAY = int(os.environ.get("DVM_DAY", str(datetime.date.today().toordinal())))
SHARE = max(1, int(os.environ.get("DVM_SHARE", "1")))
TURN = int(os.environ.get("DVM_TURN", str(int(time.time() // 3600))))


def todays(items: Sequence[T], offset: int = 0, every_day: bool = True) -> list:
    """Today's share of `items`. With `every_day` it is never empty when `items` is not: a list
    shorter than the rotation still runs one item a day, each in turn; without it such a list
    runs on as many days of the rotation as it has items, and nothing on the others. `offset`
    shifts the share, so two lists of the same things (say, methods refreshed and methods
    killed) take different ones today."""
    day = DAY + offset
    chosen = [item for i, item in enumerate(items) if i % ROTATION == day % ROTATION]
    if not chosen and items and every_day:
        chosen = [items[day % len(items)]]
    return chosen


def todays_few(items: Sequence[T], n: int) -> list:
    """`n` of `items` a day, the next `n` the day after (wrapping round), so every item runs
    within ceil(len(items) / n) consecutive days; n <= 0 takes today's share (`todays`)."""
    if n <= 0 or n >= len(items):
        return todays(items) if n <= 0 else list(items)
    start = (DAY * n) % len(items)
    return [items[(start + i) % len(items)] for i in range(n)]


def where() -> str:
    """How to repeat today's share."""
    return f"DVM_DAY={DAY} DVM_ROTATION={ROTATION}"


def in_share(unit: str) -> bool:
    """Whether `unit` (a test's id, its class's or its module's) runs in this turn's share. A
    hash of the unit's own name decides its turn: the same in a run narrowed to a file or a
    test as in the whole suite, and unmoved by tests added beside it."""
    return zlib.crc32(unit.encode()) % SHARE == TURN % SHARE


# Folders whose every test runs in every make test: no JVM (unit), or a share of their own
# already (the day's cluster suite, kill points and race kinds, TPC-H queries).
EVERY_RUN = ("tests/unit/", "tests/cluster/", "tests/drills/", "tests/tpch/")


def share_unit(module: str, cls: Optional[str], name: str, every_run: bool, share_module: bool) -> Optional[str]:
    """What takes its turn in the hourly share together, for a test `name` (of class `cls`) in
    `module` (its path from the repository's root): None for a test of every run (marked
    `every_run`, or in an EVERY_RUN folder), the module when it is marked `share_module`, else
    its class (its methods share a dbt project) or the test itself."""
    if every_run or module.startswith(EVERY_RUN):
        return None
    if share_module:
        return module
    return f"{module}::{cls if cls is not None else name}"


def split(items: Sequence[T], unit_of: Callable[[T], Optional[str]]) -> tuple[list, list]:
    """(kept, left): the items this run's share keeps (every one whose unit is None, and those
    whose unit `in_share`) and the others; everything is kept with SHARE 1."""
    kept: list = []
    left: list = []
    for item in items:
        unit = unit_of(item) if SHARE > 1 else None
        (kept if unit is None or in_share(unit) else left).append(item)
    return kept, left


def share_line() -> str:
    """How to repeat this run's share of the tests."""
    if SHARE == 1:
        return "every test"
    return f"the every_run tests and 1/{SHARE} of the others (DVM_TURN={TURN} DVM_SHARE={SHARE})"
