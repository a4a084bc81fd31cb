{#- dbt run-operation stream_table_status [--args '{schema: other}']
    Each stream table of the schema (default: the target's): its last refresh, and how many
    commits its sources have moved since. Also written to target/stream_table_status.json. -#}
{% macro stream_table_status(schema=none) %}
  {% set text = adapter.stream_table_status(schema or target.schema) %}
  {{ log(text, info=true) }}
{% endmacro %}
