"""dbt features on stream tables: persist_docs, docs generate's catalog, enforced contracts,
grants, tags and meta. dbt runs in-process on the pytest session's SparkSession, over a small
project (tests/dbt/features_project) whose one source is a Delta table made here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from python_helpers.testing import run_results

ROOT = Path(__file__).resolve().parents[2]
PROJECT_SRC = Path(__file__).resolve().parent / "features_project"

# share_module: its tests share one project (a module fixture), some reading what others ran.
pytestmark = [pytest.mark.dbt, pytest.mark.xdist_group("dbt_features"), pytest.mark.share_module]

TOUCHED_CONF = ("spark.sql.ansi.enabled", "spark.sql.shuffle.partitions", "spark.sql.session.timeZone")
ITEMS = pa.schema([("id", pa.int64()), ("category", pa.string()), ("amount", pa.int64())])
USER_COLUMNS = ["category", "n", "total"]


class Project:
    def __init__(self, path: Path, data: Path):
        self.path = path
        self.data = data

    def dbt(self, *args: str):
        from dbt.cli.main import dbtRunner

        return dbtRunner().invoke([*args, "--project-dir", str(self.path), "--profiles-dir", str(self.path)])

    def run(self, *args: str) -> dict:
        result = self.dbt("run", *args)
        refreshes = run_results.refreshes(run_results.load(self.path))
        failed = {m: r["message"] for m, r in refreshes.items() if r["status"] != "success"}
        assert result.success and not failed, f"dbt run {' '.join(args)} failed: {result.exception or failed}"
        return refreshes

    def test(self) -> None:
        result = self.dbt("test")
        failures = [f"{r.node.name}: {r.status} {r.message}" for r in (result.result or []) if r.status != "pass"]
        assert result.success and not failures, f"dbt test failed: {result.exception} {failures}"

    def add_items(self, rows: list) -> None:
        from deltalake import write_deltalake

        write_deltalake(str(self.data / "items"), pa.Table.from_pylist(rows, ITEMS), mode="append")

    def json(self, name: str) -> dict:
        with open(self.path / "target" / name, encoding="utf-8") as handle:
            return json.load(handle)


@pytest.fixture(scope="module")
def project(spark, spark_base_dir, tmp_path_factory):
    """The features project, its source made and its stream table built once."""
    from deltalake import write_deltalake

    saved_conf = {key: spark.conf.get(key, None) for key in TOUCHED_CONF}
    base = tmp_path_factory.mktemp("features")
    path, data = base / "project", base / "data"
    shutil.copytree(PROJECT_SRC, path, ignore=shutil.ignore_patterns("target", "logs"))
    rows = [{"id": i, "category": "abc"[i % 3], "amount": i * 10} for i in range(12)]
    write_deltalake(
        str(data / "items"), pa.Table.from_pylist(rows, ITEMS), configuration={"delta.enableChangeDataFeed": "true"}
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DBT_SPARK_STREAM_WORK_DIR", spark_base_dir)
        patch.setenv("FEATURES_DATA", str(data))
        proj = Project(path, data)
        proj.first_run = proj.run()
        yield proj
    for key, value in saved_conf.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def _described(spark, relation: str) -> tuple[dict, dict]:
    """({column: comment}, {detail: value}) from DESCRIBE TABLE EXTENDED."""
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {relation}").collect()
    columns, details, in_columns = {}, {}, True
    for name, value, comment in rows:
        if not name or name.startswith("#"):
            in_columns = False
            continue
        if in_columns:
            columns[name] = comment
        else:
            details[name] = value
    return columns, details


def test_persist_docs_comments_survive_differential_refreshes(project, spark):
    assert project.first_run["category_totals"]["mode"] == "full"
    columns, details = _described(spark, "features.category_totals")
    assert list(columns) == USER_COLUMNS, columns
    assert details["Comment"] == "Items per category: DESCRIPTION_MARK"
    assert columns == {"category": "the item's category", "n": "how many items", "total": None}
    for seed in range(2):
        project.add_items(
            [{"id": 100 + seed, "category": "d", "amount": 5}, {"id": 200 + seed, "category": "a", "amount": 7}]
        )
        refreshed = project.run("--select", "category_totals")["category_totals"]
        assert refreshed["mode"] == "differential" and refreshed["rows_changed"] > 0, refreshed
        again, details = _described(spark, "features.category_totals")
        assert again == columns and details["Comment"] == "Items per category: DESCRIPTION_MARK"
    # A stream table over the documented one reads its stored table differentially.
    downstream = project.run()["category_count"]
    assert downstream["mode"] == "differential" and downstream["rows_changed"] > 0, downstream
    project.test()


def test_changed_descriptions_reach_the_view_without_a_rebuild(project, spark):
    schema_yml = project.path / "models" / "schema.yml"
    original = schema_yml.read_text()
    try:
        schema_yml.write_text(original.replace("DESCRIPTION_MARK", "edited").replace("how many items", "item count"))
        refreshed = project.run("--select", "category_totals")["category_totals"]
        assert refreshed["mode"] == "differential", refreshed  # descriptions do not shape the stored result
        columns, details = _described(spark, "features.category_totals")
        assert details["Comment"] == "Items per category: edited"
        assert columns["n"] == "item count" and columns["category"] == "the item's category"
    finally:
        schema_yml.write_text(original)
        project.run("--select", "category_totals")
    project.test()


def test_docs_generate_catalog_lists_user_columns_types_and_comments(project):
    result = project.dbt("docs", "generate")
    assert result.success, result.exception
    catalog = project.json("catalog.json")
    node = catalog["nodes"]["model.stream_features.category_totals"]
    columns = node["columns"]
    assert sorted(columns, key=lambda c: columns[c]["index"]) == USER_COLUMNS, columns
    # dbt-spark's catalog reads types from Spark's schema strings, where bigint is `long`.
    assert {c: columns[c]["type"] for c in columns} == {"category": "string", "n": "long", "total": "long"}
    assert columns["category"]["comment"] == "the item's category"
    assert node["metadata"]["comment"] == "Items per category: DESCRIPTION_MARK"
    hidden = [key for n in catalog["nodes"].values() for key in [n["unique_id"], *n["columns"]] if "__dvm" in key]
    assert not hidden, hidden


def test_contract_mismatch_fails_the_model_naming_columns_and_writes_nothing(project, spark, warehouse):
    result = project.dbt("run", "--select", "wrong_contract", "--vars", "{include_failing_models: true}")
    assert not result.success
    failed = run_results.refreshes(run_results.load(project.path))["wrong_contract"]
    assert failed["status"] == "error", failed
    message = failed["message"]
    assert "wrong_contract" in message and "enforced contract" in message, message
    assert "data type mismatch" in message and "missing in definition" in message, message
    assert "missing_column" in message, message
    assert not spark.catalog.tableExists("features.wrong_contract")
    assert not (Path(warehouse) / "features.db" / "__dvm_stream_tables" / "wrong_contract").exists()


def test_contract_that_holds_builds_and_a_changed_contract_is_checked_by_a_rebuild(project):
    assert project.first_run["category_totals"]["status"] == "success"  # its contract is enforced
    schema_yml = project.path / "models" / "schema.yml"
    original = schema_yml.read_text()
    try:
        # The same type spelled differently: the contract changed, so the model is rebuilt and checked.
        schema_yml.write_text(original.replace("data_type: bigint\n    data_tests", "data_type: LONG\n    data_tests"))
        assert "LONG" in schema_yml.read_text()
        rebuilt = project.run("--select", "category_totals")["category_totals"]
        assert rebuilt["mode"] == "full", rebuilt
    finally:
        schema_yml.write_text(original)
    assert project.run("--select", "category_totals")["category_totals"]["mode"] == "full"
    project.test()


def test_grants_on_open_source_spark_fail_naming_the_model_and_the_fix(project):
    result = project.dbt("run", "--select", "granted", "--vars", "{include_failing_models: true}")
    assert not result.success
    failed = run_results.refreshes(run_results.load(project.path))["granted"]
    assert failed["status"] == "error", failed
    message = failed["message"]
    assert "stream table 'granted': grants" in message, message
    assert "remove `grants`" in message and "GRANT is not valid" in message, message


def test_tags_select_models_and_meta_reaches_the_manifest(project):
    result = project.dbt("run", "--select", "tag:nightly")
    assert result.success, result.exception
    ran = [r["unique_id"] for r in run_results.load(project.path)["results"]]
    assert ran == ["model.stream_features.category_totals"], ran
    node = project.json("manifest.json")["nodes"]["model.stream_features.category_totals"]
    assert node["meta"] == {"owner": "data-team", "tier": 2}
    assert node["tags"] == ["nightly"]
