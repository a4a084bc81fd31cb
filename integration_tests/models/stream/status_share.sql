{{ config(refresh_mode='auto') }}
{{ status_share_sql() }}
