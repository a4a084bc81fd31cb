{# A recursion whose step reads the changed source: a differential refresh first recomputes the
   old recursion in full (docs/dbt-usage.md), so `auto` refreshes it in full and says why. The
   test suites pin it to differential (DBT_SPARK_STREAM_CHAINS_REFRESH_MODE, tests/conftest.py)
   to keep the recursion's delta under dbt. #}
{{ config(refresh_mode=env_var('DBT_SPARK_STREAM_CHAINS_REFRESH_MODE', 'auto')) }}
{{ customer_chains_sql() }}
