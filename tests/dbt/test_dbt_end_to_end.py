"""dbt end to end: the integration_tests project built, mutated, refreshed and tested.

dbt runs in-process (dbtRunner) against the pytest session's SparkSession (tests/conftest.py),
which is opened the way dbt-spark's `method: session` opens it; the project's work dir is
pointed at that session's base dir so the profile, the source script and the session agree on
the warehouse. One JVM for everything keeps this file to a few minutes.

The oracle is the project's own `equals_recompute` data tests: every stream table must equal
its SQL recomputed as a plain view on the current sources.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from python_helpers.testing import run_results
from tests.support import rotation

ROOT = Path(__file__).resolve().parents[2]
PROJECT_SRC = ROOT / "integration_tests"
sys.path.insert(0, str(PROJECT_SRC / "scripts"))

import shop_data  # noqa: E402  (the example project's data script)

# One dbt project for the module (its fixture): its tests run in order on one pytest worker.
# every_run: its tests build on one another's runs of one project (a module fixture).
pytestmark = [pytest.mark.dbt, pytest.mark.xdist_group("dbt_end_to_end"), pytest.mark.every_run]
# The tests share one project and run in file order; each ends with the sources' changes
# refreshed (a `dbt run` last), so the next starts from a caught-up state without a run of its own.

STREAM_TABLES = sorted(p.stem for p in (PROJECT_SRC / "models" / "stream").glob("*.sql"))
FULL_ONLY = {"larger_orders"}  # a subquery correlated by a non-equality: auto falls back to full
# A window without PARTITION BY over the changed source (spend_rank) and a scalar subquery over
# it (status_share): auto refreshes them in full when their source changed (a run without
# changes skips them, as every model).
FULL_WHEN_CHANGED = {"spend_rank", "status_share"}
# Session settings dbt-spark changes on the shared session; restored for the tests after us.
TOUCHED_CONF = ("spark.sql.ansi.enabled", "spark.sql.shuffle.partitions", "spark.sql.session.timeZone")


class Project:
    def __init__(self, path: Path):
        self.path = path

    def dbt(self, *args: str):
        from dbt.cli.main import dbtRunner

        return dbtRunner().invoke([*args, "--project-dir", str(self.path), "--profiles-dir", str(self.path)])

    def run(self, *args: str) -> dict:
        """`dbt run` that must succeed; returns the stream tables' refreshes from run_results.json."""
        result = self.dbt("run", *args)
        refreshes = run_results.refreshes(run_results.load(self.path))
        failed = {m: r["message"] for m, r in refreshes.items() if r["status"] != "success"}
        assert result.success and not failed, f"dbt run {' '.join(args)} failed: {result.exception or failed}"
        return refreshes

    def test(self, select: str = "") -> None:
        result = self.dbt("test", *(("--select", select) if select else ()))
        assert result.exception is None, result.exception
        # The project's on-run-start hook (the demo's warm-up, empty here) reports "success".
        tests = [r for r in result.result if not run_results.is_hook(r.node.unique_id)]
        failures = [f"{r.node.name}: {r.status} {r.message}" for r in tests if r.status != "pass"]
        assert result.success and tests and not failures, "dbt test failed:\n" + "\n".join(failures)


@pytest.fixture(scope="module")
def project(spark, spark_base_dir, tmp_path_factory):
    """A copy of integration_tests whose sources exist and whose stream tables were built once."""
    saved_conf = {key: spark.conf.get(key, None) for key in TOUCHED_CONF}
    path = tmp_path_factory.mktemp("dbt") / "integration_tests"
    shutil.copytree(PROJECT_SRC, path, ignore=shutil.ignore_patterns("target", "logs", "__pycache__"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DBT_SPARK_STREAM_WORK_DIR", spark_base_dir)
        patch.setenv("DBT_SPARK_STREAM_ENGINE", "auto")
        shop_data.create(force=True)
        proj = Project(path)
        proj.first_run = proj.run()
        yield proj
    for key, value in saved_conf.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def _assert_modes(refreshes: dict, expected: str, sources_changed: bool = True) -> None:
    assert sorted(refreshes) == STREAM_TABLES
    full = FULL_ONLY | (FULL_WHEN_CHANGED if sources_changed else set())
    for model, info in refreshes.items():
        want = "full" if model in full else expected
        assert info["mode"] == want, f"{model}: {info['mode']} refresh, expected {want} ({info['message']})"
        assert isinstance(info["rows_changed"], int) and info["rows_changed"] >= 0, info
        assert info["seconds"] >= 0, info


def test_first_run_builds_every_stream_table_in_full(project):
    _assert_modes(project.first_run, "full")
    for model, info in project.first_run.items():
        assert info["reason"], f"{model}: a full refresh says why"
    assert project.first_run["shop_summary"]["rows_changed"] == 1
    project.test()


# Three rounds of random changes in make test-long, one a day in make test (tests/support/rotation.py).
@pytest.mark.parametrize("seed", rotation.todays([11, 12, 13]))
def test_refresh_after_source_changes_is_differential_and_correct(project, seed):
    shop_data.mutate(seed)
    refreshes = project.run()
    _assert_modes(refreshes, "differential")
    assert "window function without PARTITION BY" in refreshes["spend_rank"]["reason"], refreshes["spend_rank"]
    assert "scalar subquery reads the changed source" in refreshes["status_share"]["reason"], refreshes["status_share"]
    # A batch of changes touches orders and customers; the totals per customer must move.
    assert refreshes["customer_totals"]["rows_changed"] > 0
    assert "differential refresh" in refreshes["customer_totals"]["message"]
    # rows_changed is what the MERGE did to the stored rows, reported by kind.
    for model, info in refreshes.items():
        if info["mode"] == "differential" and info["rows_changed"]:
            done = info["counters"]
            assert done["rows_inserted"] + done["rows_updated"] + done["rows_deleted"] == info["rows_changed"], (
                model,
                done,
                info["rows_changed"],
            )
    project.test()


def test_run_without_source_changes_changes_nothing(project):
    refreshes = project.run()
    _assert_modes(refreshes, "differential", sources_changed=False)
    for model, info in refreshes.items():
        if model not in FULL_ONLY:
            assert info["rows_changed"] == 0, f"{model}: {info['message']}"


def test_full_refresh_flag_rebuilds_in_full(project):
    shop_data.mutate(21)
    refreshes = project.run("--full-refresh")
    _assert_modes(refreshes, "full")
    assert all(info["reason"] for info in refreshes.values())
    # The next whole run (the fallback test's) goes back to differential. (The rows of these
    # runs are checked by the whole project's data tests after the history test's run.)


def test_auto_mode_falls_back_to_full_and_says_why(project):
    info = project.first_run["larger_orders"]
    assert info["mode"] == "full"
    assert "scalar subquery correlated by" in info["reason"], info


def test_a_fallback_to_full_is_a_dbt_warning_that_warn_error_makes_an_error(project, warehouse):
    from deltalake import DeltaTable

    stored = DeltaTable(f"{warehouse}/analytics.db/__dvm_stream_tables/larger_orders")
    before = stored.version()
    shop_data.mutate(41)
    result = project.dbt(
        "run", "--select", "larger_orders", "--warn-error-options", '{"error": ["AdapterEventWarning"]}'
    )
    assert not result.success
    refresh = run_results.refreshes(run_results.load(project.path))["larger_orders"]
    assert refresh["status"] == "error"
    assert "larger_orders: full refresh (not differentiable: scalar subquery correlated by" in refresh["message"], (
        refresh
    )
    stored.update_incremental()
    assert stored.version() == before, "the refresh stopped before writing anything"
    # Without the flag it is a warning, and the model refreshes; the others catch up, back to
    # differential after the --full-refresh of the test before.
    again = project.run()
    assert again["larger_orders"]["mode"] == "full"
    _assert_modes(again, "differential")
    project.test("larger_orders")


def test_stream_table_status_lists_each_stream_table_and_how_far_its_sources_moved(project):

    def status() -> dict:
        result = project.dbt("run-operation", "stream_table_status")
        assert result.success, result.exception
        with open(project.path / "target" / "stream_table_status.json", encoding="utf-8") as handle:
            return {s["name"]: s for s in json.load(handle)["stream_tables"]}

    caught_up = status()
    assert set(STREAM_TABLES) <= set(caught_up), sorted(caught_up)
    for name in STREAM_TABLES:
        assert caught_up[name]["commits_behind"] == 0, caught_up[name]
        assert caught_up[name]["refreshed_at"] and caught_up[name]["sources"], caught_up[name]
    shop_data.mutate(51)
    behind = status()
    orders = next(s for s in behind["customer_totals"]["sources"] if s["relation"] == "shop.orders")
    assert orders["current_version"] > orders["consumed_version"], orders
    assert behind["customer_totals"]["commits_behind"] > 0
    project.run()
    after = status()
    assert all(after[name]["commits_behind"] == 0 for name in STREAM_TABLES)
    # What the last refreshes cost, the newest one included (its length from its commit time).
    recent = after["customer_totals"]["recent_refreshes"]
    assert recent[0]["mode"] == "full" and recent[-1]["mode"] == "differential", recent
    assert all(r["seconds"] is not None and r["seconds"] > 0 for r in recent), recent


def test_refresh_history_is_a_table_with_a_row_per_refresh_and_the_reason_of_each_full_one(project, spark):
    """By the time this test runs every stream table was built and refreshed: the history has
    the first build, the differential refreshes, and larger_orders' fallbacks with their reason."""
    shop_data.mutate(61)
    project.run()
    ran = run_results.load(project.path)
    invocation = ran["metadata"]["invocation_id"]
    result = project.dbt("run-operation", "stream_table_refresh_history")
    assert result.success, result.exception
    rows = [
        r.asDict()
        for r in spark.sql(
            "SELECT * FROM analytics.stream_table_refresh_history ORDER BY stream_table, storage_version"
        ).collect()
    ]
    by: dict = {}
    for r in rows:
        by.setdefault(r["stream_table"], []).append(r)
    assert set(STREAM_TABLES) <= set(by), sorted(by)
    totals = by["customer_totals"]
    assert totals[0]["mode"] == "full" and totals[0]["reason"] == "first build", totals[0]
    assert totals[0]["source_versions_from"] is None and "shop.orders" in totals[0]["source_versions_to"]
    last = totals[-1]
    assert last["mode"] == "differential" and last["change_rows"] > 0 and last["seconds"] > 0, last
    assert json.loads(last["source_versions_from"]) == json.loads(totals[-2]["source_versions_to"]), totals[-2:]
    assert last["started_at"] < last["committed_at"] and "plan" in json.loads(last["phases"]), last
    assert last["dbt_invocation_id"] == invocation, last  # the dbt run that refreshed it
    # What each commit wrote: the build's whole result; the refresh's MERGE, by its own metrics.
    assert totals[0]["rows_written"] > 0 and totals[0]["files_added"] > 0, totals[0]
    assert totals[0]["files_read"] is None and totals[0]["read_bytes"] is None, totals[0]  # a full refresh's
    assert totals[0]["spark_statements"] > 0, totals[0]  # a full refresh's statements are kept too
    changed = [last[c] for c in ("rows_inserted", "rows_updated", "rows_deleted")]
    assert None not in changed and sum(changed) > 0, last
    differential = [r for r in rows if r["mode"] == "differential"]
    assert all(r["files_read"] is not None and r["rows_deleted"] is not None for r in differential), differential
    # The history holds the counters this run's adapter_response reported, for each model it
    # refreshed differentially.
    reported = {n: r["counters"] for n, r in run_results.refreshes(ran).items() if r["mode"] == "differential"}
    assert reported, ran
    for name, counters in reported.items():
        newest = by[name][-1]
        held = {c: newest[c] for c in ("files_read", "files_skipped", "read_bytes")}
        # (a refresh whose change met no stored row reports no MERGE counts; its history says 0)
        held.update({c: newest[c] for c in ("rows_inserted", "rows_deleted") if c in counters})
        assert held == {c: counters.get(c) for c in held}, (name, held, counters)
        # Statements: the history's before the write, adapter_response's with the write and what follows.
        assert 0 < newest["spark_statements"] < counters["spark_statements"], (name, newest, counters)
    fallbacks = [r for r in by["larger_orders"] if r["mode"] == "full"]
    assert len(fallbacks) >= 2 and all("not differentiable" in r["reason"] for r in fallbacks), fallbacks
    # auto's rule beside its reason: a window over all customers is computed whole at both versions.
    ranked = [(r["reason"], r["rule"]) for r in by["spend_rank"] if r["mode"] == "full"]
    window = [rule for reason, rule in ranked if "window function without PARTITION BY" in (reason or "")]
    assert window and set(window) == {"whole_input"}, ranked
    assert all(rule is None for reason, rule in ranked if reason == "first build"), ranked
    # The three questions docs/dbt-usage.md answers with it run as written there.
    spark.sql(
        "SELECT stream_table, reason, count(*) FROM analytics.stream_table_refresh_history WHERE mode = 'full' "
        "AND committed_at > current_timestamp() - INTERVAL 7 DAYS GROUP BY stream_table, reason"
    ).collect()
    rules = spark.sql(
        "SELECT stream_table, rule, count(*) AS refreshes, max(read_ratio_pct) AS highest_read_estimate_pct "
        "FROM analytics.stream_table_refresh_history WHERE rule IS NOT NULL GROUP BY stream_table, rule"
    ).collect()
    assert ("spend_rank", "whole_input") in {(r["stream_table"], r["rule"]) for r in rules}, rules
    p95 = spark.sql(
        "SELECT stream_table, percentile(seconds, 0.95) AS p95 FROM analytics.stream_table_refresh_history "
        "GROUP BY stream_table"
    ).collect()
    assert len(p95) == len(by) and all(r["p95"] is not None and r["p95"] > 0 for r in p95), p95
    # Written again, it holds the same rows (replaced, not appended).
    assert project.dbt("run-operation", "stream_table_refresh_history").success
    assert spark.sql("SELECT count(*) FROM analytics.stream_table_refresh_history").collect()[0][0] == len(rows)
    # Every stream table, after the full refreshes, fallbacks and differential runs of the tests
    # before: equal to its recompute.
    project.test()


def test_differential_mode_rejects_unsupported_sql_naming_construct_and_model(project, spark):
    result = project.dbt("run", "--select", "larger_orders_strict", "--vars", "{include_failing_models: true}")
    assert not result.success
    refresh = run_results.refreshes(run_results.load(project.path))["larger_orders_strict"]
    assert refresh["status"] == "error"
    message = refresh["message"]
    assert "larger_orders_strict" in message and "scalar subquery correlated by" in message, message
    assert "differential" in message, message
    # A failed refresh commits nothing; its row is in the refresh history all the same.
    invocation = run_results.load(project.path)["metadata"]["invocation_id"]
    assert project.dbt("run-operation", "stream_table_refresh_history").success
    failed = [
        r.asDict()
        for r in spark.sql(
            "SELECT * FROM analytics.stream_table_refresh_history WHERE stream_table = 'larger_orders_strict'"
        ).collect()
    ]
    assert [r["mode"] for r in failed] == ["failed"], failed
    assert "scalar subquery correlated by" in failed[0]["reason"] and failed[0]["seconds"] > 0, failed
    assert failed[0]["dbt_invocation_id"] == invocation and failed[0]["committed_at"] is None, failed


def test_unknown_refresh_mode_is_a_compilation_error(project):
    result = project.dbt("run", "--select", "bad_refresh_mode", "--vars", "{include_failing_models: true}")
    assert not result.success
    refresh = run_results.refreshes(run_results.load(project.path))["bad_refresh_mode"]
    assert refresh["status"] == "error"
    assert "bad_refresh_mode" in refresh["message"], refresh
    assert "refresh_mode must be one of auto, differential, full" in refresh["message"], refresh


def test_explain_says_what_the_next_refresh_would_do_and_changes_nothing(project):
    shop_data.mutate(31)
    result = project.dbt("run", "--select", "customer_totals larger_orders", "--vars", "{stream_table_explain: true}")
    assert result.success, result.exception
    explained = {
        r["unique_id"].split(".")[-1]: {"message": r.get("message") or ""}
        for r in run_results.load(project.path)["results"]
    }
    assert explained["customer_totals"]["message"].startswith(
        "explained, nothing refreshed: next refresh: differential (changes in shop.orders"
    ), explained
    assert (
        "next refresh: full (not differentiable: scalar subquery correlated by" in explained["larger_orders"]["message"]
    ), explained
    # Nothing was refreshed: the changes are still there for the next run (of the two: the
    # last test of the module, no other needs the rest caught up).
    after = project.run("--select", "customer_totals larger_orders")
    assert after["customer_totals"]["mode"] == "differential" and after["customer_totals"]["rows_changed"] > 0
    project.test("customer_totals larger_orders")
