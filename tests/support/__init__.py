"""Test support shared by tests/spark (and usable by tests/dbt): the Spark session, the oracle,
source-table helpers, change-batch strategies and the query-shape catalogue."""
