{# Pinned to differential: every batch of the example's changes touches customers, which the
   recursive step reads, so under `auto` this would refresh in full each time (a differential
   refresh first recomputes the old recursion in full: docs/dbt-usage.md). Pinned, the tests
   keep the recursion's delta under dbt, and the demo shows what it costs. #}
{{ config(refresh_mode='differential') }}
{{ customer_chains_sql() }}
