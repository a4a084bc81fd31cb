-- depends_on: {{ ref('repeat_customers') }}
-- (built after the stream table, whose refresh registers the source views it reads)
{{ repeat_customers_sql() }}
