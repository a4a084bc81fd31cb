{{ config(refresh_mode='auto') }}
{{ status_rollup_sql() }}
