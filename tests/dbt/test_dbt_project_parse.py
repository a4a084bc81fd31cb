"""dbt parses the integration project with the spark_stream plugin (no Spark needed)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT_SRC = ROOT / "integration_tests"

pytestmark = pytest.mark.dbt


def _parse(tmp_path, monkeypatch, *extra):
    from dbt.cli.main import dbtRunner

    path = tmp_path / "integration_tests"
    shutil.copytree(PROJECT_SRC, path, ignore=shutil.ignore_patterns("target", "logs"))
    monkeypatch.setenv("DBT_SPARK_STREAM_WORK_DIR", str(tmp_path / "work"))
    result = dbtRunner().invoke(["parse", "--project-dir", str(path), "--profiles-dir", str(path), *extra])
    assert result.success, result.exception
    return result.result  # the Manifest


def test_stream_models_tests_and_sources(tmp_path, monkeypatch):
    manifest = _parse(tmp_path, monkeypatch)
    streams = {
        n.name: n
        for n in manifest.nodes.values()
        if n.resource_type == "model" and n.config.materialized == "stream_table"
    }
    expected = sorted(p.stem for p in (PROJECT_SRC / "models" / "stream").glob("*.sql"))
    assert sorted(streams) == expected
    # Every stream table has an equals_recompute test against its view twin.
    tested = {
        n.attached_node.split(".")[-1]
        for n in manifest.nodes.values()
        if n.resource_type == "test" and n.test_metadata and n.test_metadata.name == "equals_recompute"
    }
    assert tested == set(expected)
    macro = manifest.macros["macro.dbt_spark_stream.materialization_stream_table_spark_stream"]
    assert macro.package_name == "dbt_spark_stream"
    orders = manifest.sources["source.spark_stream_integration_tests.shop.orders"]
    assert orders.meta["delta_path"] == str(tmp_path / "work") + "/warehouse/shop.db/orders"
    # Models that must fail are off unless asked for.
    assert "larger_orders_strict" not in {n.name for n in manifest.nodes.values()}


def test_failing_models_switch_on_with_a_var(tmp_path, monkeypatch):
    manifest = _parse(tmp_path, monkeypatch, "--vars", "{include_failing_models: true}")
    names = {n.name for n in manifest.nodes.values()}
    assert {"larger_orders_strict", "bad_refresh_mode"} <= names
