-- depends_on: {{ ref('status_customers') }}
-- (built after the stream table, whose refresh registers the source views it reads)
{{ status_customers_sql() }}
