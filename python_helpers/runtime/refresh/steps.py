"""Named steps of a refresh, for the crash drills.

The refresh calls `reached(name)` at each step of its sequence. Normally that does nothing. Two
environment variables turn it into a test instrument (tests/drills):

* DBT_SPARK_STREAM_TRACE_STEPS=<file>: append each step name reached to the file, so a test
  learns the sequence from the code instead of listing it by hand;
* DBT_SPARK_STREAM_KILL_AT=<step>[+<seconds>][@<model>]: SIGKILL this process when the step is
  reached (or that many seconds after, to land inside the work that follows: a MERGE, a vacuum);
  with @<model>, only in the refresh of that model (`refreshing`), so a drill can kill the
  second or the last model of a run after the others committed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Iterator

TRACE = "DBT_SPARK_STREAM_TRACE_STEPS"
KILL_AT = "DBT_SPARK_STREAM_KILL_AT"
_current = threading.local()  # the model this thread refreshes (dbt's threads refresh several)


@contextlib.contextmanager
def refreshing(model: str) -> Iterator[None]:
    """Steps reached inside belong to `model`'s refresh."""
    before = getattr(_current, "model", None)
    _current.model = model
    try:
        yield
    finally:
        _current.model = before


def reached(name: str) -> None:
    trace = os.environ.get(TRACE)
    if trace:
        with open(trace, "a", encoding="utf-8") as handle:
            handle.write(name + "\n")
    target = os.environ.get(KILL_AT)
    if not target:
        return
    target, _, model = target.partition("@")
    step, _, delay = target.partition("+")
    if step != name or (model and getattr(_current, "model", None) != model):
        return
    if delay:
        timer = threading.Timer(float(delay), _kill)
        timer.daemon = True
        timer.start()
    else:
        _kill()


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
