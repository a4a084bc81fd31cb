-- depends_on: {{ ref('north_flags') }}
-- (built after the stream table, whose refresh registers the source views it reads)
{{ north_flags_sql() }}
