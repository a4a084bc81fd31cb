-- depends_on: {{ ref('larger_orders') }}
-- (built after the stream table, whose refresh registers the source views it reads)
{{ larger_orders_sql() }}
