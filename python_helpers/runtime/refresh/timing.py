"""Wall-clock phases of one refresh, reported with its result (where the time goes)."""

from __future__ import annotations

import time
from contextlib import contextmanager


class Phases:
    def __init__(self):
        self.seconds: dict = {}

    @contextmanager
    def __call__(self, name: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started
