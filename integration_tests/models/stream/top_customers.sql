{{ config(refresh_mode='auto') }}
{{ top_customers_sql() }}
