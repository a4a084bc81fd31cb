{{ config(refresh_mode='differential') }}
-- Must fail: a subquery correlated by a non-equality cannot be refreshed differentially.
{{ larger_orders_sql() }}
