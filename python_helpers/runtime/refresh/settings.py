"""Session settings that change what a query returns.

The stored result was computed under the session's settings; a differential refresh under
others would add rows computed one way to rows computed another (a date cut at another time
zone, an overflow that is NULL under one ANSI mode and an error under the other). The settings
below are recorded with every refresh, and a change of any of them rebuilds the stream table,
naming the setting. So does a change of Spark's version: an upgrade can change a default
(a `spark.sql.legacy.*` switch, a function's behaviour) that no session setting records.

Settings added to the list after a stream table's last refresh are not a change: its record
has none of them, and they are recorded from that refresh on.
"""

from __future__ import annotations

from typing import Optional

from python_helpers.runtime.connections.base import Connection

# Settings read with their effective value (default included).
RESULT_SETTINGS = (
    "spark.sql.session.timeZone",
    "spark.sql.ansi.enabled",
    "spark.sql.timestampType",
    "spark.sql.decimalOperations.allowPrecisionLoss",
    "spark.sql.mapKeyDedupPolicy",
    "spark.sql.caseSensitive",
    # Files skipped instead of failing the query: rows silently missing.
    "spark.sql.files.ignoreMissingFiles",
    "spark.sql.files.ignoreCorruptFiles",
    # How literals, strings and old dates are read.
    "spark.sql.parser.escapedStringLiterals",
    "spark.sql.session.collation.default",
    "spark.sql.parquet.binaryAsString",
    "spark.sql.parquet.datetimeRebaseModeInRead",
    "spark.sql.parquet.int96RebaseModeInRead",
)
SPARK_VERSION = "spark.version"
# Recorded since format 2's first release: a record without them is from before, not a change.
ADDED_LATER = frozenset(RESULT_SETTINGS[6:]) | {SPARK_VERSION}
# Every explicitly set setting under these prefixes counts too (legacy switches change semantics).
RESULT_PREFIXES = ("spark.sql.legacy.",)


def result_settings(conn: Connection) -> dict:
    """{setting: value} of the settings that change query results, as this session has them."""
    try:
        values = conn.settings(list(RESULT_SETTINGS))  # one round trip where the connection can
    except Exception:  # noqa: BLE001 - a server that does not answer: nothing recorded, so a rebuild
        values = {}
    out = {key: str(values[key]) for key in RESULT_SETTINGS if values.get(key) is not None}
    try:
        out[SPARK_VERSION] = conn.spark_version()
    except Exception:  # noqa: BLE001 - a server that does not say
        pass
    try:
        explicit = conn.explicit_confs()
    except Exception:  # noqa: BLE001 - older Spark / Connect without getAll
        explicit = {}
    for key, value in sorted((explicit or {}).items()):
        if key.startswith(RESULT_PREFIXES):
            out[key] = str(value)
    return out


# A user function's code digest, recorded beside the settings: a deploy that changes it changes
# what the stream table's query returns (connections/function_code.py).
FUNCTION_PREFIX = "function "


def recorded_settings(conn: Connection, function_code: dict) -> dict:
    """What a refresh records and compares with the last one: the result settings, and the code
    digest of each user function the query calls."""
    codes = {FUNCTION_PREFIX + name: digest for name, digest in sorted(function_code.items())}
    return {**result_settings(conn), **codes}


def changed_setting(old: Optional[dict], new: dict) -> Optional[str]:
    """A sentence naming the first setting that differs, or None (None when `old` is unknown)."""
    if old is None:
        return None
    recorded_before = any(key in old for key in ADDED_LATER)
    for key in sorted(set(old) | set(new)):
        if key in ADDED_LATER and not recorded_before:
            continue  # the record predates these keys
        if old.get(key) != new.get(key):
            before = old.get(key, "unset")
            after = new.get(key, "unset")
            if key.startswith(FUNCTION_PREFIX):
                name = key[len(FUNCTION_PREFIX) :]
                if key not in old:
                    return (
                        f"the code of user function {name}() was not recorded by the last refresh, so a "
                        "change to it cannot be ruled out"
                    )
                if key not in new:
                    return f"the query no longer calls user function {name}() as the last refresh recorded it"
                return (
                    f"the code of user function {name}() changed since the last refresh, and the stored "
                    "result was computed by the old code"
                )
            if key == SPARK_VERSION:
                return (
                    f"Spark's version changed from {before} to {after} since the last refresh, and the "
                    "stored result was computed by the old one (an upgrade can change defaults and functions)"
                )
            return (
                f"the session setting {key} changed from {before} to {after} since the last refresh, "
                "and the stored result was computed under the old value"
            )
    return None
