{{ config(refresh_mode='differential') }}
-- Must fail: ORDER BY ... LIMIT cannot be refreshed differentially.
{{ top_customers_sql() }}
