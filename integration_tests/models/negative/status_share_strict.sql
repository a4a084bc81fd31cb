{{ config(refresh_mode='differential') }}
-- Must fail: a scalar subquery in a grouped SELECT list cannot be refreshed differentially yet.
{{ status_share_sql() }}
