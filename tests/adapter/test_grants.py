"""dbt's grants suites: open-source Spark has no grants, so each is skipped with what Spark says.

Spark 4.1 answers dbt-spark's `show grants on <relation>` with "[PARSE_SYNTAX_ERROR] Syntax error
at or near 'on': missing 'FUNCTIONS'" and `grant select on ... to ...` with
"[INVALID_STATEMENT_OR_CLAUSE] The statement or clause: GRANT is not valid"; dbt-spark's grant
macros are for Databricks. The classes stay here so the suites run where grants exist.
"""

from __future__ import annotations

import pytest
from dbt.tests.adapter.grants.test_incremental_grants import BaseIncrementalGrants
from dbt.tests.adapter.grants.test_invalid_grants import BaseInvalidGrants
from dbt.tests.adapter.grants.test_model_grants import BaseModelGrants
from dbt.tests.adapter.grants.test_seed_grants import BaseSeedGrants
from dbt.tests.adapter.grants.test_snapshot_grants import BaseSnapshotGrants

NO_GRANTS = (
    "open-source Spark SQL has no GRANT / SHOW GRANTS: it answers dbt-spark's `show grants on` "
    "with PARSE_SYNTAX_ERROR and `grant` with INVALID_STATEMENT_OR_CLAUSE (Databricks only)"
)

pytestmark = pytest.mark.skip(reason=NO_GRANTS)


class TestModelGrantsSparkStream(BaseModelGrants):
    pass


class TestIncrementalGrantsSparkStream(BaseIncrementalGrants):
    pass


class TestSeedGrantsSparkStream(BaseSeedGrants):
    pass


class TestSnapshotGrantsSparkStream(BaseSnapshotGrants):
    pass


class TestInvalidGrantsSparkStream(BaseInvalidGrants):
    pass
