-- depends_on: {{ ref('top_customers') }}
-- (built after the stream table, whose refresh registers the source views it reads)
{{ top_customers_sql() }}
