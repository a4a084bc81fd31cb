-- depends_on: {{ ref('monthly_big_orders') }}
-- (built after the stream table, whose refresh registers the source views it reads)
{{ monthly_big_orders_sql() }}
