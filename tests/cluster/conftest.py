"""The cluster suites of the day (tests/support/cluster_project.py, SUITES): the other is not
collected, not skipped. tests/conftest.py names the day's in the run's header."""

from __future__ import annotations

from tests.support.cluster_project import SUITES, todays_suites

collect_ignore = [name for name in SUITES if name not in todays_suites()]
