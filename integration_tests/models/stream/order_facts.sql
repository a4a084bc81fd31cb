{{ config(unique_key='order_id') }}
{{ order_facts_sql() }}
