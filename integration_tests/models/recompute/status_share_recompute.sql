-- depends_on: {{ ref('status_share') }}
-- (built after the stream table, whose refresh registers the source views it reads)
{{ status_share_sql() }}
