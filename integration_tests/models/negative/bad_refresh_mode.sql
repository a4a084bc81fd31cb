{{ config(refresh_mode='sometimes') }}
-- Must fail at compile time: refresh_mode is one of auto, differential, full.
{{ customer_totals_sql() }}
