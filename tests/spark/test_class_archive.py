"""The class archive a local session may start with (dbt/adapters/spark_stream/class_archive.py):
recorded by a real JVM, then mapped in by another that must use it (`-Xshare:on` makes a JVM
that cannot map the archive fail to start rather than start without it).

Cost: 82-90 s alone, about 2 min in `make test` (119 s on 2026-12-07), for an opt-in feature:
marked `slow`, so it runs in `make test-long` and not in `make test` (deselected, not skipped)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dbt.adapters.spark_stream import class_archive

pytestmark = pytest.mark.slow

# A second process, as each `dbt run` is: a local session started with the archive, whose JVM
# logs every class it loads and from where.
_SESSION = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.extraJavaOptions", sys.argv[1]).getOrCreate())
print("rows", spark.range(10).count())
spark.stop()
"""


def test_a_session_started_with_the_archive_loads_its_classes_from_it(tmp_path):
    archive = str(tmp_path / "spark-classes.jsa")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    # A process of its own, as a user runs it (this worker may hold the suite's session).
    made = subprocess.run(
        [sys.executable, "-m", "dbt.adapters.spark_stream.class_archive", archive],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    assert "class archive: " in made.stdout
    assert os.path.getsize(archive) > 10 * 2**20

    loads = tmp_path / "loads.log"
    options = f"{class_archive.java_option(archive)} -Xshare:on -Xlog:class+load=info:file={loads}"
    done = subprocess.run(
        [sys.executable, "-c", _SESSION, options], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rows 10" in done.stdout
    lines = loads.read_text().splitlines()
    spark_classes = [line for line in lines if " org.apache.spark." in line]
    from_archive = [line for line in spark_classes if "shared objects file (top)" in line]
    # Most Spark classes the session loads come from the archive (the rest: classes generated
    # at run time, and ones the recording run did not load).
    assert len(from_archive) > 0.5 * len(spark_classes) > 1000, (len(from_archive), len(spark_classes))
