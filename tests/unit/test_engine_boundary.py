"""The refresh logic reaches Spark only through a connection (runtime/connections/base.py): no
SparkSession API, JVM or SparkContext outside its bindings (connections/spark.py for in-process
and Connect sessions, connections/thrift.py for SQL over the Thrift protocol)."""

from __future__ import annotations

import re
from pathlib import Path

from python_helpers.runtime.connections import thrift as thrift_engine

ROOT = Path(__file__).resolve().parents[2] / "python_helpers"
BINDINGS = {"runtime/connections/spark.py", "runtime/connections/thrift.py"}
SESSION_API = re.compile(
    r"_jvm|_jsparkSession|sparkContext|createDataFrame|createOrReplaceTempView|localCheckpoint|"
    r"\.toArrow\(|\.read\.|\.catalog\.|spark\.sql\(|\.collect\(\)|from pyspark\.sql import"
)


def test_no_session_api_outside_the_bindings():
    offenders = []
    for package in ("runtime", "dvm", "sql"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if str(path.relative_to(ROOT)) in BINDINGS:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                # Setting names ("spark.sql.catalog.spark_catalog") are not the session's API.
                code = re.sub(r'"[^"]*"|\'[^\']*\'', '""', line.split("#", 1)[0])
                if code.lstrip().startswith(("from python_helpers", "import python_helpers")):
                    continue
                if SESSION_API.search(code) and not code.lstrip().startswith(("*", '"', "'")):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == [], "\n".join(offenders)


def test_thrift_string_literals_keep_backslashes_and_quotes():
    # Spark reads backslashes in string literals as escapes: Hadoop glob escapes must survive.
    assert thrift_engine._string("/t/a\\{b}'c") == "'/t/a\\\\{b}\\'c'"


def test_thrift_file_globs_group_by_directory_and_escape_commas():
    files = ["/t/p=1/a.parquet", "/t/p=1/b,c.parquet", "/t/p=2/d.parquet"]
    groups = thrift_engine._by_directory(files)
    assert groups == {"/t/p=1": files[:2], "/t/p=2": files[2:]}
    assert thrift_engine._glob_names(groups["/t/p=1"]) == ["a.parquet", "b\\,c.parquet"]
