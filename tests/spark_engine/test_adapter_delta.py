"""dbt's adapter suites that need Delta Lake (dbt-spark's snapshots and its incremental `merge`
strategy run MERGE INTO, which Spark without Delta Lake refuses), and the stream-table suite of
tests/adapter, through `type: spark_stream` over Spark Connect to this directory's server with
Delta Lake (conftest.py): the profile a cluster with Delta Lake would have, `engine: spark`.

Each class gets dbt-tests-adapter's tmp project and schema of its own.
"""

from __future__ import annotations

import pytest
from dbt.tests.adapter.basic.test_snapshot_check_cols import BaseSnapshotCheckCols
from dbt.tests.adapter.basic.test_snapshot_timestamp import BaseSnapshotTimestamp
from dbt.tests.adapter.incremental.test_incremental_merge_exclude_columns import BaseMergeExcludeColumns

# dbt-tests-adapter's fixtures (project, adapter, unique_schema, ...), as tests/adapter imports them.
from dbt.tests.fixtures.project import *  # noqa: F401,F403,E402
from dbt.tests.util import run_dbt

from tests.adapter.test_stream_table import BaseStreamTable, refresh_info
from tests.support import rotation

DELTA = {"+file_format": "delta"}


@pytest.fixture(scope="class")
def dbt_profile_target(delta_server):
    return {
        "type": "spark_stream",
        "method": "connect",
        "host": delta_server.remote,
        "threads": 1,
        "engine": "spark",
        "server_side_parameters": {"spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC"},
    }


@pytest.fixture(scope="class")
def warehouse(delta_server):
    """The server's warehouse: where a `schema.table` source is found at its managed path."""
    return delta_server.warehouse


# dbt's stock suites run dbt-spark's own statements, none of ours. Its two snapshot suites (1.5-3.5
# minutes each in make test) are marked `slow`: make test-long runs them, make test deselects
# them. The incremental `merge` suite (about 70 s with its set-up) runs on one day of make test's
# rotation (tests/support/rotation.py, offset 3: day 3); left out, it is not collected, not skipped.


@pytest.mark.slow
class TestSnapshotCheckColsDelta(BaseSnapshotCheckCols):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"name": "snapshot_strategy_check_cols", "seeds": DELTA, "snapshots": DELTA}


@pytest.mark.slow
class TestSnapshotTimestampDelta(BaseSnapshotTimestamp):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"name": "snapshot_strategy_timestamp", "seeds": DELTA, "snapshots": DELTA}


if rotation.todays(["merge_exclude_columns"], offset=3, every_day=False):

    @pytest.mark.every_run  # a day's share of its own
    class TestMergeExcludeColumnsDelta(BaseMergeExcludeColumns):
        @pytest.fixture(scope="class")
        def project_config_update(self):
            return {"models": DELTA, "seeds": DELTA}


class TestStreamTableSparkEngine(BaseStreamTable):
    """Build, differential refreshes, a refresh with nothing to do, --full-refresh and docs
    generate of a stream table through dbt on the spark engine (a Delta table in the catalog)."""

    @pytest.fixture(scope="class")
    def project_config_update(self):
        # The suite asserts differential refreshes: auto must not learn its way to full ones.
        return {"models": {"+auto_from_history": False}}

    def test_the_stored_result_is_a_delta_table_in_the_catalog(self, project, source_path):
        info = refresh_info(run_dbt(["run", "--select", "totals"]), "totals")
        assert info["engine"] == "spark", info
        rows = project.run_sql(f"DESCRIBE DETAIL {project.test_schema}.__dvm_stored__totals", fetch="all")
        assert rows and str(rows[0][0]).lower() == "delta", rows

    def test_dbt_over_connect_leaves_the_process_a_classic_spark_client(self, project, delta_server):
        """dbt's `method: connect` in-process must not mark the whole process as a Spark Connect
        client: the other tests of this pytest worker (and the subprocesses it starts) build
        classic sessions, which failed after dbt's runs over Connect with CONNECT_URL_NOT_SET."""
        import os

        from dbt.adapters.spark_stream import spark_connect

        assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ
        assert any(url == delta_server.remote for url in spark_connect._sessions), "dbt did not connect"
