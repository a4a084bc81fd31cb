{{ config(refresh_mode='auto') }}
{{ spend_rank_sql() }}
