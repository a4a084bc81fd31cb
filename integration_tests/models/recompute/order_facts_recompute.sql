-- depends_on: {{ ref('order_facts') }}
-- (built after the stream table, whose refresh registers the source views it reads)
{{ order_facts_sql() }}
