-- depends_on: {{ ref('shop_summary') }}
-- (built after the stream table, whose refresh registers the source views it reads)
{{ shop_summary_sql() }}
