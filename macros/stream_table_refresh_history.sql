{#- dbt run-operation stream_table_refresh_history [--args '{schema: other}']
    Writes <schema>.stream_table_refresh_history (default schema: the target's): one row per
    refresh commit still in the stream tables' Delta logs (mode, reason, start, commit time,
    seconds, change rows, source versions, phase times), and logs a summary per stream table. -#}
{% macro stream_table_refresh_history(schema=none) %}
  {% set text = adapter.stream_table_refresh_history(schema or target.schema) %}
  {{ log(text, info=true) }}
{% endmacro %}
