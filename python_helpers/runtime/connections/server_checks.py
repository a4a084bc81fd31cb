"""What the Spark server must offer before a stream table is written.

A stream table is a view in Spark's catalog over files in the warehouse. With the in-memory
catalog (a session or server started without Hive support) every view is gone when the server
restarts while the stored result stays behind, so the next run finds files it cannot name and
`dbt test` finds no relation: refuse before anything is written.
"""

from __future__ import annotations

import re

from python_helpers.errors import StreamTableError
from python_helpers.runtime.connections.base import Connection

CATALOG_SETTING = "spark.sql.catalogImplementation"

# The refresh plans with Spark 4 SQL; WITH RECURSIVE needs 4.1's planner.
MIN_SERVER = (4, 0)
RECURSION_SERVER = (4, 1)


def spark_version(text: str) -> tuple[int, int]:
    """(major, minor) of a version as servers report it: `4.1.4`, `3.5.1-amzn-0`, or Spark SQL's
    `version()`, `4.1.4 <git hash>`; (0, 0) when it names no version."""
    found = re.match(r"\s*(\d+)\.(\d+)", text)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def too_old(version: str) -> bool:
    """A server the refresh cannot run on at all."""
    return spark_version(version) < MIN_SERVER


def lacks_recursion(version: str) -> bool:
    """A server that runs stream tables but cannot plan WITH RECURSIVE."""
    return MIN_SERVER <= spark_version(version) < RECURSION_SERVER


def required_version() -> str:
    """What to tell the user a server needs."""
    return (
        f"Spark {MIN_SERVER[0]}.{MIN_SERVER[1]} or later "
        f"({RECURSION_SERVER[0]}.{RECURSION_SERVER[1]} for WITH RECURSIVE)"
    )


def catalog_implementation(conn: Connection) -> str:
    """The session's catalog kind ("hive" or "in-memory"); "" when the server does not say."""
    try:
        return str(conn.conf(CATALOG_SETTING, "") or "").strip().lower()
    except Exception:  # noqa: BLE001 - a server that hides static settings: nothing to judge
        return ""


def require_persistent_catalog(conn: Connection, model: str) -> None:
    """Raise a StreamTableError naming `model` when the session's views die with the server."""
    if catalog_implementation(conn) != "in-memory":
        return
    raise StreamTableError(
        model,
        f"the Spark session uses the in-memory catalog ({CATALOG_SETTING}=in-memory), so the stream "
        "table's view would be lost when the server restarts; nothing was written",
        f"start the Spark server (or session) with Hive support: `--conf {CATALOG_SETTING}=hive` "
        "(SparkSession.builder.enableHiveSupport()) and a metastore that outlives it",
    )
