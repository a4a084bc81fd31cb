"""Data safety through dbt: things a user does beside dbt that must never make a stream table,
or a view it publishes, show wrong rows. Each case reproduces what a user did, with real dbt,
real Spark and real Delta tables, and checks the rows (the project's `equals_recompute` test,
or the Delta tables read directly where the recompute itself would read the wrong object).
"""

from __future__ import annotations

import os
import shutil
from collections import Counter

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture
from deltalake import DeltaTable

from tests.adapter.test_stream_table import (
    BaseStreamTable,
    assert_equals_recompute,
    change_orders,
    refresh_info,
    write_orders,
)


def totals_of(rows) -> Counter:
    """The stream table's rows computed from the source rows in Python."""
    count, total = Counter(), Counter()
    for r in rows:
        count[r["customer_id"]] += 1
        total[r["customer_id"]] += r["amount"]
    return Counter((c, count[c], total[c]) for c in count)


def delta_rows(path: str) -> list:
    return DeltaTable(path).to_pyarrow_table().to_pylist()


def stored_path(warehouse: str, schema: str, model: str = "totals") -> str:
    return os.path.join(warehouse, f"{schema}.db", "__dvm_stream_tables", model)


class TestUsersViewAtTheSourceName(BaseStreamTable):
    """A user's view at the source's name, over the user's own data at a path that merely starts
    like the source's: it is left alone, and the stream table is built from the Delta source."""

    @pytest.fixture(scope="class")
    def users_view(self, project, warehouse, spark, source_path):
        schema = project.test_schema
        own = os.path.join(warehouse, f"{schema}.db", "orders_eu")  # the Delta source is .../orders
        spark.createDataFrame([(900, 9, 1), (901, 9, 2)], "order_id bigint, customer_id int, amount bigint").write.mode(
            "overwrite"
        ).parquet(own)
        text = f"SELECT * FROM parquet.`{own}` WHERE amount > 0"
        spark.sql(f"CREATE VIEW {schema}.orders AS {text}")
        return text

    def test_the_users_view_is_left_alone(self, project, spark, users_view, source_path):
        schema = project.test_schema
        results, log = run_dbt_and_capture(["run", "--select", "totals"])
        assert refresh_info(results, "totals")["mode"] == "full"
        described = spark.sql(f"DESCRIBE TABLE EXTENDED {schema}.orders").collect()
        assert next(r[1] for r in described if r[0] == "View Text") == users_view
        assert sorted(tuple(r) for r in spark.sql(f"SELECT * FROM {schema}.orders").collect()) == [
            (900, 9, 1),
            (901, 9, 2),
        ]
        assert f"{schema}.orders is a catalog object dbt-spark-stream did not create" in log, log
        # The stream table reads the Delta source, not the user's view.
        shown = Counter(tuple(r) for r in spark.sql(f"SELECT * FROM {schema}.totals").collect())
        assert shown == totals_of(delta_rows(source_path))
        change_orders(source_path, 101)
        assert refresh_info(run_dbt(["run", "--select", "totals"]), "totals")["mode"] == "differential"
        shown = Counter(tuple(r) for r in spark.sql(f"SELECT * FROM {schema}.totals").collect())
        assert shown == totals_of(delta_rows(source_path))
        assert next(
            r[1] for r in spark.sql(f"DESCRIBE TABLE EXTENDED {schema}.orders").collect() if r[0] == "View Text"
        )
        assert spark.sql(f"SELECT count(*) FROM {schema}.orders").collect()[0][0] == 2

    test_first_build = None
    test_refresh_after_inserts_updates_deletes = None
    test_refresh_without_changes_is_skipped = None
    test_full_refresh = None
    test_docs_generate = None


class TestSourceRecreatedAtItsPath(BaseStreamTable):
    """A source dropped and recreated at its path, brought back to the version the published
    view showed: the view at the source's name shows the new table, never the old one's files."""

    def test_the_source_view_follows_the_new_table(self, project, spark, source_path, warehouse):
        schema = project.test_schema
        run_dbt(["run"])
        change_orders(source_path, 101)  # the source at version 3
        run_dbt(["run"])
        version = DeltaTable(source_path).version()
        shutil.rmtree(source_path)
        write_orders(source_path, [{"order_id": i, "customer_id": 7, "amount": i} for i in range(1, 6)])
        while DeltaTable(source_path).version() < version:
            write_orders(source_path, [{"order_id": 1000 + version, "customer_id": 8, "amount": 1}], mode="append")
        assert DeltaTable(source_path).version() == version
        info = refresh_info(run_dbt(["run"]), "totals")
        assert info["mode"] == "full" and "Delta table id changed" in info["reason"], info
        shown = Counter(tuple(r) for r in spark.sql(f"SELECT * FROM {schema}.orders").collect())
        assert shown == Counter(tuple(r.values()) for r in delta_rows(source_path))
        assert_equals_recompute()

    test_first_build = None
    test_refresh_after_inserts_updates_deletes = None
    test_refresh_without_changes_is_skipped = None
    test_full_refresh = None
    test_docs_generate = None


class TestStoredResultChangedByHand(BaseStreamTable):
    """Rows deleted or updated by hand in the stored result's Delta table: the next refresh
    rebuilds, saying why, instead of applying a change on top of rows it no longer knows."""

    def test_a_hand_made_commit_is_rebuilt(self, project, source_path, warehouse):
        run_dbt(["run"])
        stored = stored_path(warehouse, project.test_schema)
        DeltaTable(stored).delete("customer_id = 1")
        change_orders(source_path, 101)
        info = refresh_info(run_dbt(["run"]), "totals")
        assert info["mode"] == "full", info
        assert "changed outside dbt-spark-stream" in info["reason"] and "DELETE" in info["reason"], info
        assert_equals_recompute()
        # The rebuild is the new state: the next refresh is differential again.
        change_orders(source_path, 201)
        assert refresh_info(run_dbt(["run"]), "totals")["mode"] == "differential"
        assert_equals_recompute()
        DeltaTable(stored).update(updates={"order_count": "order_count + 1"}, predicate="customer_id = 2")
        info = refresh_info(run_dbt(["run"]), "totals")
        assert info["mode"] == "full" and "UPDATE" in info["reason"], info
        assert_equals_recompute()

    test_first_build = None
    test_refresh_after_inserts_updates_deletes = None
    test_refresh_without_changes_is_skipped = None
    test_full_refresh = None
    test_docs_generate = None
