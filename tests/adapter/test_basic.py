"""dbt's basic adapter suites: every materialization dbt-spark has, through `type: spark_stream`."""

from __future__ import annotations

import getpass

import pytest
from dbt.tests.adapter.basic import expected_catalog
from dbt.tests.adapter.basic.test_adapter_methods import BaseAdapterMethod
from dbt.tests.adapter.basic.test_base import BaseSimpleMaterializations
from dbt.tests.adapter.basic.test_docs_generate import BaseDocsGenerate
from dbt.tests.adapter.basic.test_empty import BaseEmpty
from dbt.tests.adapter.basic.test_ephemeral import BaseEphemeral
from dbt.tests.adapter.basic.test_generic_tests import BaseGenericTests
from dbt.tests.adapter.basic.test_incremental import BaseIncremental
from dbt.tests.adapter.basic.test_singular_tests import BaseSingularTests
from dbt.tests.adapter.basic.test_singular_tests_ephemeral import BaseSingularTestsEphemeral

# dbt-spark's snapshots need MERGE INTO (file_format delta, iceberg or hudi), which this
# directory's Spark (no Delta Lake) refuses: the snapshot suites run on the spark engine's server
# with Delta Lake instead, in tests/spark_engine/test_adapter_delta.py.


class TestSimpleMaterializationsSparkStream(BaseSimpleMaterializations):
    pass


class TestSingularTestsSparkStream(BaseSingularTests):
    pass


class TestSingularTestsEphemeralSparkStream(BaseSingularTestsEphemeral):
    pass


class TestEmptySparkStream(BaseEmpty):
    pass


class TestEphemeralSparkStream(BaseEphemeral):
    pass


class TestIncrementalSparkStream(BaseIncremental):
    pass


class TestGenericTestsSparkStream(BaseGenericTests):
    pass


class TestAdapterMethodSparkStream(BaseAdapterMethod):
    pass


class TestDocsGenerateSparkStream(BaseDocsGenerate):
    # Spark's catalog in its own words: seeds' integer ids are `long`, strings `string`; the
    # owner is the OS user running Spark; Hive tables carry no statistics dbt reports.
    @pytest.fixture(scope="class")
    def expected_catalog(self, project):
        return expected_catalog.base_expected_catalog(
            project,
            role=getpass.getuser(),
            id_type="long",
            text_type="string",
            time_type="timestamp",
            view_type="view",
            table_type="table",
            model_stats=expected_catalog.no_stats(),
        )
