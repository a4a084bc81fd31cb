{{ config(refresh_mode='auto') }}
{{ larger_orders_sql() }}
