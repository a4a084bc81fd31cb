-- depends_on: {{ ref('status_rollup') }}
-- (built after the stream table, whose refresh registers the source views it reads)
{{ status_rollup_sql() }}
