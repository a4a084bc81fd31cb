-- depends_on: {{ ref('customer_totals') }}
-- (built after the stream table, whose refresh registers the source views it reads)
{{ customer_totals_sql() }}
