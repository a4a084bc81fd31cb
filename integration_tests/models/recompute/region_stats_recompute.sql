-- depends_on: {{ ref('region_stats') }}
-- (built after the stream table, whose refresh registers the source views it reads)
{{ region_stats_sql() }}
