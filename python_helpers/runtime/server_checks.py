"""What the Spark server must offer before a stream table is written.

A stream table is a view in Spark's catalog over files in the warehouse. With the in-memory
catalog (a session or server started without Hive support) every view is gone when the server
restarts while the stored result stays behind, so the next run finds files it cannot name and
`dbt test` finds no relation: refuse before anything is written.
"""

from __future__ import annotations

from python_helpers.errors import StreamTableError
from python_helpers.runtime.engine import Engine

CATALOG_SETTING = "spark.sql.catalogImplementation"


def catalog_implementation(engine: Engine) -> str:
    """The session's catalog kind ("hive" or "in-memory"); "" when the server does not say."""
    try:
        return str(engine.conf(CATALOG_SETTING, "") or "").strip().lower()
    except Exception:  # noqa: BLE001 - a server that hides static settings: nothing to judge
        return ""


def require_persistent_catalog(engine: Engine, model: str) -> None:
    """Raise a StreamTableError naming `model` when the session's views die with the server."""
    if catalog_implementation(engine) != "in-memory":
        return
    raise StreamTableError(
        model,
        f"the Spark session uses the in-memory catalog ({CATALOG_SETTING}=in-memory), so the stream "
        "table's view would be lost when the server restarts; nothing was written",
        f"start the Spark server (or session) with Hive support: `--conf {CATALOG_SETTING}=hive` "
        "(SparkSession.builder.enableHiveSupport()) and a metastore that outlives it",
    )
