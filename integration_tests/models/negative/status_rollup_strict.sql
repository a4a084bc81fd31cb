{{ config(refresh_mode='differential') }}
-- Must fail: ROLLUP cannot be refreshed differentially yet.
{{ status_rollup_sql() }}
