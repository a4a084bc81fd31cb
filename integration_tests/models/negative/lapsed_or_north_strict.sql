{{ config(refresh_mode='differential') }}
-- Must fail: EXISTS inside OR cannot be refreshed differentially yet.
{{ lapsed_or_north_sql() }}
