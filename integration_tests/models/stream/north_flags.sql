{{ config(refresh_mode='auto') }}
{{ north_flags_sql() }}
