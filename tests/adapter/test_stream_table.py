"""Stream tables in the style of dbt's adapter suites: a project per class, real dbt, real Spark.

The source is a Delta table with the change feed on, written and changed with `deltalake` at
Spark's managed path of the test schema (`<warehouse>/<schema>.db/orders`), so the source
needs no `meta`. Every check of a stream table's rows is the package's `equals_recompute` data
test against a view of the same SQL (the query recomputed on the current source).
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from dbt.tests.util import rm_file, run_dbt, write_file

ORDERS_SCHEMA = pa.schema([("order_id", pa.int64()), ("customer_id", pa.int32()), ("amount", pa.int64())])
CDF_ON = {"delta.enableChangeDataFeed": "true"}

SOURCES_YML = """
version: 2
sources:
  - name: shop
    schema: "{{ target.schema }}"
    tables:
      - name: orders
"""

# The stream table's query, shared with its recompute view through a macro.
TOTALS_MACRO = """
{% macro totals_sql() %}
select customer_id, count(*) as order_count, sum(amount) as total_amount
from {{ source('shop', 'orders') }}
group by customer_id
{% endmacro %}
"""

TOTALS_SQL = "{{ config(materialized='stream_table') }}\n{{ totals_sql() }}\n"
TABLE_TOTALS_SQL = "{{ config(materialized='table') }}\n-- depends_on: {{ ref('anchor') }}\n{{ totals_sql() }}\n"
# A view of the same SQL: the recompute. It reads the source view a stream table publishes, so
# it runs after the stream table.
RECOMPUTE_SQL = "{{ config(materialized='view') }}\n-- depends_on: {{ ref('totals') }}\n{{ totals_sql() }}\n"

SCHEMA_YML = """
version: 2
models:
  - name: totals
    data_tests:
      - equals_recompute:
          arguments:
            compare_model: ref('totals_recompute')
"""


def orders_path(warehouse: str, schema: str) -> str:
    return os.path.join(warehouse, f"{schema}.db", "orders")


def write_orders(path: str, rows, mode: str = "overwrite") -> None:
    from deltalake import write_deltalake

    table = pa.Table.from_pylist(rows, schema=ORDERS_SCHEMA)
    write_deltalake(path, table, mode=mode, configuration=CDF_ON if mode == "overwrite" else None)


def first_orders():
    return [{"order_id": i, "customer_id": i % 4, "amount": 10 * i} for i in range(1, 21)]


def change_orders(path: str, start: int) -> None:
    """One batch of each kind: inserts (ids from start), an update, a delete."""
    from deltalake import DeltaTable

    # New customers 4 and 5 (new groups), customer 1's amounts moved, one of the first orders gone.
    write_orders(
        path, [{"order_id": start + i, "customer_id": 4 + i % 2, "amount": i + 1} for i in range(3)], mode="append"
    )
    DeltaTable(path).update(updates={"amount": "amount + 7"}, predicate="customer_id = 1")
    DeltaTable(path).delete(f"order_id = {start // 100}")


def results_by_name(results) -> dict:
    return {r.node.name: r for r in results}


def refresh_info(results, name: str) -> dict:
    result = results_by_name(results)[name]
    assert result.status == "success", f"{name}: {result.status} {result.message}"
    return result.adapter_response


def assert_equals_recompute(select: str = "test_type:data") -> None:
    results = run_dbt(["test", "--select", select])
    assert results and all(r.status == "pass" for r in results), [(r.node.name, r.status) for r in results]


class BaseStreamTable:
    """A stream table over one Delta source: first build, differential refreshes checked against
    the recomputed query, and --full-refresh. The methods run in order on one project."""

    @pytest.fixture(scope="class")
    def macros(self):
        return {"totals_sql.sql": TOTALS_MACRO}

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "sources.yml": SOURCES_YML,
            "schema.yml": SCHEMA_YML,
            "totals.sql": TOTALS_SQL,
            "totals_recompute.sql": RECOMPUTE_SQL,
        }

    @pytest.fixture(scope="class")
    def source_path(self, project, warehouse):
        path = orders_path(warehouse, project.test_schema)
        write_orders(path, first_orders())
        return path

    def test_first_build(self, project, source_path):
        info = refresh_info(run_dbt(["run"]), "totals")
        assert info["mode"] == "full" and info["reason"] == "first build", info
        assert info["rows_changed"] == 4  # one stored row per customer
        assert_equals_recompute()

    def test_refresh_after_inserts_updates_deletes(self, project, source_path):
        for start in (101, 201):
            change_orders(source_path, start)
            info = refresh_info(run_dbt(["run"]), "totals")
            assert info["mode"] == "differential", info
            assert info["rows_changed"] > 0, info
            assert_equals_recompute()

    def test_refresh_without_changes_is_skipped(self, project, source_path):
        info = refresh_info(run_dbt(["run", "--select", "totals"]), "totals")
        assert info["mode"] == "differential" and info["skipped"] and info["rows_changed"] == 0, info

    def test_full_refresh(self, project, source_path):
        change_orders(source_path, 301)
        info = refresh_info(run_dbt(["run", "--full-refresh"]), "totals")
        assert info["mode"] == "full" and info["reason"] == "--full-refresh", info
        assert_equals_recompute()
        change_orders(source_path, 401)
        info = refresh_info(run_dbt(["run"]), "totals")
        assert info["mode"] == "differential", info
        assert_equals_recompute()

    def test_docs_generate(self, project, source_path):
        # dbt's catalog lists the stream table (a view in Spark's catalog) with the model's
        # columns only: the stored result's bookkeeping columns stay hidden.
        catalog = run_dbt(["docs", "generate"])
        node = catalog.nodes["model.test.totals"]
        assert node.metadata.type == "view"
        assert list(node.columns) == ["customer_id", "order_count", "total_amount"]


class TestStreamTable(BaseStreamTable):
    pass


class BaseStreamTableSwitchMaterialization(BaseStreamTable):
    """A model switched from `table` to `stream_table` and back keeps its name and its rows."""

    @pytest.fixture(scope="class")
    def models(self):
        # `anchor` is a stream table over the same source, so its source view exists for the
        # table model's first run.
        return {
            "sources.yml": SOURCES_YML,
            "anchor.sql": "{{ config(materialized='stream_table') }}\nselect * from {{ source('shop', 'orders') }}\n",
            "totals.sql": TABLE_TOTALS_SQL,
            "totals_recompute.sql": RECOMPUTE_SQL,
            "schema.yml": SCHEMA_YML,
        }

    def test_table_to_stream_table_and_back(self, project, source_path, spark):
        def table_type():
            # Asked of Spark's catalog, not of dbt's relation cache: what readers see.
            return spark.catalog.getTable(f"{project.test_schema}.totals").tableType

        run_dbt(["run"])
        assert table_type() == "MANAGED"
        assert_equals_recompute()

        write_file(TOTALS_SQL, project.project_root, "models", "totals.sql")
        info = refresh_info(run_dbt(["run"]), "totals")
        assert info["mode"] == "full" and info["reason"] == "first build", info
        assert table_type() == "VIEW"  # a stream table is read through its view
        change_orders(source_path, 101)
        info = refresh_info(run_dbt(["run"]), "totals")
        assert info["mode"] == "differential", info
        assert_equals_recompute()

        write_file(TABLE_TOTALS_SQL, project.project_root, "models", "totals.sql")
        change_orders(source_path, 201)
        run_dbt(["run"])
        assert table_type() == "MANAGED"
        assert_equals_recompute()

    # The inherited cases run on the project as the switch left it: a table again.
    test_first_build = None
    test_refresh_after_inserts_updates_deletes = None
    test_refresh_without_changes_is_skipped = None
    test_full_refresh = None
    test_docs_generate = None


class TestStreamTableSwitchMaterialization(BaseStreamTableSwitchMaterialization):
    pass


class BaseStreamTableRenameRemove(BaseStreamTable):
    """Renaming a stream table's model builds the new name from scratch; removing a model leaves
    the other stream tables refreshing differentially."""

    def test_rename_and_remove(self, project, source_path):
        run_dbt(["run"])
        rm_file(project.project_root, "models", "totals.sql")
        write_file(TOTALS_SQL, project.project_root, "models", "customer_totals.sql")
        write_file(
            RECOMPUTE_SQL.replace("ref('totals')", "ref('customer_totals')"),
            project.project_root,
            "models",
            "totals_recompute.sql",
        )
        write_file(
            SCHEMA_YML.replace("name: totals", "name: customer_totals"), project.project_root, "models", "schema.yml"
        )
        write_file(TOTALS_SQL, project.project_root, "models", "second_totals.sql")
        change_orders(source_path, 101)
        results = run_dbt(["run"])
        assert "totals" not in results_by_name(results)
        info = refresh_info(results, "customer_totals")
        assert info["mode"] == "full" and info["reason"] == "first build", info
        assert_equals_recompute()

        rm_file(project.project_root, "models", "second_totals.sql")
        change_orders(source_path, 201)
        results = run_dbt(["run"])
        assert sorted(results_by_name(results)) == ["customer_totals", "totals_recompute"]
        assert refresh_info(results, "customer_totals")["mode"] == "differential"
        assert_equals_recompute()

    test_first_build = None
    test_refresh_after_inserts_updates_deletes = None
    test_refresh_without_changes_is_skipped = None
    test_full_refresh = None
    test_docs_generate = None


class TestStreamTableRenameRemove(BaseStreamTableRenameRemove):
    pass


MIXED_SCHEMA_YML = """
version: 2
models:
  - name: totals
    data_tests:
      - equals_recompute:
          arguments:
            compare_model: ref('totals_recompute')
  - name: big_from_view
    data_tests:
      - equals_recompute:
          arguments:
            compare_model: ref('big_from_view_recompute')
  - name: tiers
    data_tests:
      - equals_recompute:
          arguments:
            compare_model: ref('tiers_recompute')
"""

STG_ORDERS_SQL = """{{ config(materialized='view') }}
-- depends_on: {{ ref('totals') }}
select order_id, customer_id, amount from {{ source('shop', 'orders') }} where amount >= 20
"""
BIG_FROM_VIEW_SQL = "select customer_id, max(amount) as top_amount from {{ ref('stg_orders') }} group by customer_id"
TIERS_SQL = (
    "select case when total_amount >= 100 then 'high' else 'low' end as tier, count(*) as customers "
    "from {{ ref('totals') }} group by 1"
)


class BaseStreamTableMixedDag(BaseStreamTable):
    """Views, tables, incremental models and stream tables in one DAG, run by `dbt run` and
    `dbt build`: a stream table over a view, another over a stream table, a table and an
    incremental model over a stream table."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "sources.yml": SOURCES_YML,
            "schema.yml": MIXED_SCHEMA_YML,
            "totals.sql": TOTALS_SQL,
            "totals_recompute.sql": RECOMPUTE_SQL,
            "stg_orders.sql": STG_ORDERS_SQL,
            "big_from_view.sql": "{{ config(materialized='stream_table') }}\n" + BIG_FROM_VIEW_SQL,
            "big_from_view_recompute.sql": "-- depends_on: {{ ref('big_from_view') }}\n"
            "{{ config(materialized='view') }}\n" + BIG_FROM_VIEW_SQL,
            "tiers.sql": "{{ config(materialized='stream_table') }}\n" + TIERS_SQL,
            "tiers_recompute.sql": "-- depends_on: {{ ref('tiers') }}\n{{ config(materialized='view') }}\n" + TIERS_SQL,
            "totals_snapshot_table.sql": "{{ config(materialized='table') }}\nselect * from {{ ref('totals') }}",
            "totals_history.sql": """{{ config(materialized='incremental') }}
select customer_id, total_amount, {{ var('batch', 0) }} as batch from {{ ref('totals') }}
""",
        }

    def test_mixed_dag(self, project, source_path):
        results = run_dbt(["run"])
        assert all(r.status == "success" for r in results), [(r.node.name, r.status, r.message) for r in results]
        for name in ("totals", "big_from_view", "tiers"):
            assert refresh_info(results, name)["mode"] == "full"
        assert_equals_recompute()

        change_orders(source_path, 101)
        results = run_dbt(["build", "--vars", "batch: 1"])
        assert all(r.status in ("success", "pass") for r in results), [
            (r.node.name, r.status, r.message) for r in results
        ]
        for name in ("totals", "big_from_view", "tiers"):
            assert refresh_info(results, name)["mode"] == "differential", name
        schema = project.test_schema
        table_rows = project.run_sql(f"select count(*) from {schema}.totals_snapshot_table", fetch="one")
        customers = project.run_sql(f"select count(distinct customer_id) from {schema}.orders", fetch="one")
        assert table_rows[0] == customers[0] == 6
        batches = project.run_sql(
            f"select batch, count(*) from {project.test_schema}.totals_history group by batch order by batch",
            fetch="all",
        )
        assert [tuple(r) for r in batches] == [(0, 4), (1, 6)]

    test_first_build = None
    test_refresh_after_inserts_updates_deletes = None
    test_refresh_without_changes_is_skipped = None
    test_full_refresh = None
    test_docs_generate = None


class TestStreamTableMixedDag(BaseStreamTableMixedDag):
    pass
