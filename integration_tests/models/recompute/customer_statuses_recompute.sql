-- depends_on: {{ ref('customer_statuses') }}
-- (built after the stream table, whose refresh registers the source views it reads)
{{ customer_statuses_sql() }}
