-- depends_on: {{ ref('spend_rank') }}
-- (built after the stream table, whose refresh registers the source views it reads)
{{ spend_rank_sql() }}
