"""The one place that decides which Delta engine a refresh uses.

`engine` in the profile: `embedded` (the `deltalake` package in the dbt process; Spark needs no
Delta Lake), `spark` (Delta Lake SQL inside Spark), or `auto`: spark when the session has Delta
Lake's SQL extension and catalog (the two settings docs/deployment.md names), embedded otherwise.
"""

from __future__ import annotations

from python_helpers.errors import InvalidConfig
from python_helpers.runtime.connections.base import Connection
from python_helpers.runtime.delta.base import DeltaEngine

EXTENSIONS = "spark.sql.extensions"
CATALOG = "spark.sql.catalog.spark_catalog"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def has_delta_lake(conn: Connection) -> bool:
    """Does the session have Delta Lake's SQL extension and catalog?"""
    try:
        found = conn.settings([EXTENSIONS, CATALOG])
        extensions, catalog = found.get(EXTENSIONS) or "", found.get(CATALOG) or ""
    except Exception:  # noqa: BLE001 - a server that does not answer settings: no Delta Lake known
        return False
    return DELTA_EXTENSION in extensions and DELTA_CATALOG in catalog


def engine_name(conn: Connection, name: str) -> str:
    """`embedded` or `spark` for the profile's `engine` (auto decided here)."""
    if name == "auto":
        return "spark" if has_delta_lake(conn) else "embedded"
    return name


def delta_engine(conn: Connection, name: str, model: str) -> DeltaEngine:
    """The Delta engine for one refresh on `conn`; close() it when the refresh ends."""
    chosen = engine_name(conn, name)
    if chosen == "spark":
        if not has_delta_lake(conn):
            raise InvalidConfig(
                model,
                "engine: spark needs Delta Lake in Spark, and this session has no "
                f"{EXTENSIONS}={DELTA_EXTENSION} with {CATALOG}={DELTA_CATALOG}",
                "start Spark with the delta-spark jars and those two settings (docs/deployment.md), or use "
                "engine: embedded (or auto) in the profile",
            )
        from python_helpers.runtime.delta.spark.engine import SparkDelta

        return SparkDelta(conn.private())
    from python_helpers.runtime.delta.embedded.engine import EmbeddedDelta

    return EmbeddedDelta(conn)
