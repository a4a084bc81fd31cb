{{ config(refresh_mode='auto') }}
{{ lapsed_or_north_sql() }}
