{{ config(refresh_mode='auto') }}
{{ customer_chains_sql() }}
