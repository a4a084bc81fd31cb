"""A Spark server without Hive support is refused before anything is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from python_helpers.runtime.connections.base import as_connection
from python_helpers.runtime.connections.server_checks import catalog_implementation, require_persistent_catalog

pytestmark = pytest.mark.spark

# A session of its own (the test run's session has Hive support and is one per process).
_IN_MEMORY_REFRESH = textwrap.dedent("""
    import json, os, sys
    from pyspark.sql import SparkSession
    from python_helpers.errors import StreamTableError
    from python_helpers.runtime.api import RefreshRequest, refresh_stream_table

    warehouse = sys.argv[1]
    spark = (SparkSession.builder.master("local[1]").appName("in-memory-catalog")
             .config("spark.sql.catalogImplementation", "in-memory")
             .config("spark.sql.warehouse.dir", warehouse)
             .config("spark.ui.enabled", "false").getOrCreate())
    out = {"catalog": spark.conf.get("spark.sql.catalogImplementation")}
    request = RefreshRequest(model="orders_by_day", schema="analytics", identifier="orders_by_day",
                             sql="SELECT day, count(*) AS n FROM raw.orders GROUP BY day")
    try:
        refresh_stream_table(spark, request)
        out["error"] = None
    except StreamTableError as err:
        out["error"] = str(err)
    out["views"] = [t.name for t in spark.catalog.listTables("default")]
    spark.stop()
    print("RESULT " + json.dumps(out))
""")


def test_in_memory_catalog_is_refused_before_anything_is_written(tmp_path):
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run(
        [sys.executable, "-c", _IN_MEMORY_REFRESH, str(warehouse)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=os.getcwd(),
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"the subprocess failed:\n{done.stderr[-3000:]}"
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out["catalog"] == "in-memory"
    error = out["error"]
    assert error is not None, "a refresh on an in-memory catalog went ahead"
    assert error.startswith("stream table 'orders_by_day':")
    assert "in-memory catalog" in error and "spark.sql.catalogImplementation=hive" in error
    assert out["views"] == []
    assert list(warehouse.rglob("*")) == [], "files were written before the refusal"


def test_hive_session_passes(spark):
    assert catalog_implementation(as_connection(spark)) == "hive"
    require_persistent_catalog(as_connection(spark), "any_model")  # raises on a catalog that forgets views
