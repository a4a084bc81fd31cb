-- depends_on: {{ ref('customer_chains') }}
-- (built after the stream table, whose refresh registers the source views it reads)
{{ customer_chains_sql() }}
