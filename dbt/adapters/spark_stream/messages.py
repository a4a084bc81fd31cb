"""Error text as the console shows it."""

from __future__ import annotations


def first_line(exc: BaseException, limit: int = 500) -> str:
    """Spark errors carry whole query plans; the console gets the first line of it."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return text if len(text) <= limit else text[:limit] + "..."
