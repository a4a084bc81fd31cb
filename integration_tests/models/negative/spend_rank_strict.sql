{{ config(refresh_mode='differential') }}
-- Must fail: a window function cannot be refreshed differentially yet.
{{ spend_rank_sql() }}
