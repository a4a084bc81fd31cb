-- depends_on: {{ ref('lapsed_or_north') }}
-- (built after the stream table, whose refresh registers the source views it reads)
{{ lapsed_or_north_sql() }}
