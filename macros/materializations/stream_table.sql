{#-
  materialized='stream_table': built in full once, then refreshed differentially from the
  Delta change data feed of its sources on every `dbt run`. The engine (python_helpers) does
  the work; this macro gathers the model's config and sources and reports the result.
-#}
{% materialization stream_table, adapter='spark_stream' %}

  {%- set refresh_mode = spark_stream__refresh_mode() -%}
  {%- set identifier = model['alias'] -%}
  {#- The engine exposes the result as a Spark view over the stored Delta table, so the
      relation dbt caches (and `dbt test` / downstream refs read) is a view. -#}
  {%- set target_relation = api.Relation.create(
        database=database, schema=schema, identifier=identifier, type='view') -%}

  {#- dbt run --vars '{stream_table_explain: true}': say what the refresh would do and show the
      operator tree, without refreshing anything. -#}
  {%- if var('stream_table_explain', false) | as_bool -%}
    {%- set response = adapter.stream_table_explain(
          model=model['name'], schema=schema, identifier=identifier, sql=sql, refresh_mode=refresh_mode,
          full_refresh=should_full_refresh(), sources=spark_stream__source_delta_paths(model),
          auto_full_threshold=config.get('auto_full_threshold'),
          float_recompute_every=config.get('float_recompute_every'),
          auto_from_history=config.get('auto_from_history'),
          unique_key=config.get('unique_key')) -%}
    {%- do store_result('main', response=response) -%}
    {{ return({'relations': [target_relation]}) }}
  {%- endif -%}

  {#- The engine publishes the model's name as a view over the stored result. A table of that
      name (e.g. the model was materialized='table' before) is not ours: drop it first, as
      dbt's own materializations replace a relation of another type. An existing view is
      simply replaced by the engine. -#}
  {%- set existing_relation = load_cached_relation(target_relation) -%}
  {%- if existing_relation is not none and not existing_relation.is_view -%}
    {{ log("stream table " ~ model['name'] ~ ": replacing existing " ~ existing_relation.type ~ " "
           ~ existing_relation ~ " (not a stream table)", info=True) }}
    {%- do adapter.drop_relation(existing_relation) -%}
  {%- endif -%}


  {{ run_hooks(pre_hooks) }}

  {%- set response = adapter.stream_table_refresh(
        model=model['name'],
        schema=schema,
        identifier=identifier,
        sql=sql,
        refresh_mode=refresh_mode,
        full_refresh=should_full_refresh(),
        sources=spark_stream__source_delta_paths(model),
        auto_full_threshold=config.get('auto_full_threshold'),
        float_recompute_every=config.get('float_recompute_every'),
        retention_hours=config.get('retention_hours'),
        docs=spark_stream__persisted_docs(model),
        contract=spark_stream__contract_columns(model),
        auto_from_history=config.get('auto_from_history'),
        unique_key=config.get('unique_key'),
        catalog_information=(existing_relation.information
          if existing_relation is not none and existing_relation.information else none),
  ) -%}
  {#- store_result keeps our response object whole: its mode / rows_changed / seconds fields
      land in run_results.json `adapter_response`, its message on the console line. -#}
  {%- do store_result('main', response=response) -%}

  {{ run_hooks(post_hooks) }}

  {#- As dbt-spark's table and view do; open-source Spark refuses GRANT, and the error says so. -#}
  {%- set grant_config = config.get('grants') -%}
  {%- if grant_config -%}
    {%- do adapter.stream_table_apply_grants(model['name'], target_relation, grant_config,
          should_revoke(existing_relation, full_refresh_mode=True)) -%}
  {%- endif -%}

  {{ return({'relations': [target_relation]}) }}

{% endmaterialization %}


{#- persist_docs: the model's description (relation: true) and column descriptions (columns:
    true) as the view's comments; the engine keeps them across refreshes. -#}
{% macro spark_stream__persisted_docs(node) %}
  {%- set docs = {} -%}
  {%- if config.persist_relation_docs() and node.get('description') -%}
    {%- do docs.update({'relation': node['description']}) -%}
  {%- endif -%}
  {%- if config.persist_column_docs() -%}
    {%- set columns = {} -%}
    {%- for column in (node.get('columns') or {}).values() if column.get('description') -%}
      {%- do columns.update({column['name']: column['description']}) -%}
    {%- endfor -%}
    {%- do docs.update({'columns': columns}) -%}
  {%- endif -%}
  {{ return(docs) }}
{% endmacro %}


{#- contract: {enforced: true}: the declared [name, data_type] pairs, checked by the engine
    against the query's columns before the stored result is built. -#}
{% macro spark_stream__contract_columns(node) %}
  {%- set contract_config = config.get('contract') -%}
  {%- if not (contract_config and contract_config.enforced) -%}
    {{ return(none) }}
  {%- endif -%}
  {%- set declared = [] -%}
  {%- for column in (node.get('columns') or {}).values() -%}
    {%- do declared.append([column['name'], column.get('data_type') or '']) -%}
  {%- endfor -%}
  {{ return(declared) }}
{% endmacro %}


{% macro spark_stream__refresh_mode() %}
  {%- set mode = config.get('refresh_mode') or 'auto' -%}
  {%- set allowed = ['auto', 'differential', 'full'] -%}
  {%- if mode is not string or (mode | lower) not in allowed -%}
    {{ exceptions.raise_compiler_error(
        "stream table '" ~ model['name'] ~ "': refresh_mode must be one of "
        ~ allowed | join(', ') ~ ", got '" ~ mode ~ "'") }}
  {%- endif -%}
  {{ return(mode | lower) }}
{% endmacro %}


{#-
  Explicit Delta locations of the project's sources, keyed the way compiled SQL names them
  (lower-case `schema.table`). A source table sets `meta: {delta_path: ...}`; a source may
  instead set `meta: {delta_root: ...}` for `<delta_root>/<table identifier>`. Sources with
  neither are looked up at Spark's managed-table path by the engine. Every source of the
  project is listed, not only the model's own: a view the model reads (inlined by the engine)
  may read other sources.
-#}
{% macro spark_stream__source_delta_paths(node) %}
  {%- set paths = {} -%}
  {%- for dep in graph.sources -%}
    {%- set src = graph.sources.get(dep) -%}
    {%- if src -%}
      {%- set meta = src.get('meta') or {} -%}
      {%- set path = meta.get('delta_path') -%}
      {%- if not path and meta.get('delta_root') -%}
        {%- set path = meta.get('delta_root').rstrip('/') ~ '/' ~ src['identifier'] -%}
      {%- endif -%}
      {%- if path -%}
        {%- do paths.update({(src['schema'] ~ '.' ~ src['identifier']) | lower: path}) -%}
      {%- endif -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(paths) }}
{% endmacro %}
