"""Named steps of a refresh, for the crash drills.

The refresh calls `reached(name)` at each step of its sequence. Normally that does nothing. Two
environment variables turn it into a test instrument (tests/drills):

* DBT_SPARK_STREAM_TRACE_STEPS=<file>: append each step name reached to the file, so a test
  learns the sequence from the code instead of listing it by hand;
* DBT_SPARK_STREAM_KILL_AT=<step>[+<seconds>]: SIGKILL this process when the step is reached
  (or that many seconds after, to land inside the work that follows: a MERGE, a vacuum).
"""

from __future__ import annotations

import os
import signal
import threading

TRACE = "DBT_SPARK_STREAM_TRACE_STEPS"
KILL_AT = "DBT_SPARK_STREAM_KILL_AT"


def reached(name: str) -> None:
    trace = os.environ.get(TRACE)
    if trace:
        with open(trace, "a", encoding="utf-8") as handle:
            handle.write(name + "\n")
    target = os.environ.get(KILL_AT)
    if not target:
        return
    step, _, delay = target.partition("+")
    if step != name:
        return
    if delay:
        timer = threading.Timer(float(delay), _kill)
        timer.daemon = True
        timer.start()
    else:
        _kill()


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
