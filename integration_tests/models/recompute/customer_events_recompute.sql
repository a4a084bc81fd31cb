-- depends_on: {{ ref('customer_events') }}
-- (built after the stream table, whose refresh registers the source views it reads)
{{ customer_events_sql() }}
