{#-
  Data test: `model` holds exactly the rows of `compare_model` (a plain view of the same SQL,
  i.e. the query recomputed on the current sources), as a multiset.

      data_tests:
        - equals_recompute:
            arguments:
              compare_model: ref('customer_totals_recompute')

  Returns one row per surplus copy on either side (symmetric EXCEPT ALL), so it fails if any
  row differs or appears a different number of times. Floating-point columns are rounded to
  `precision` decimals first: a differential refresh adds and subtracts doubles in another
  order than a recompute (STDDEV, AVG of doubles), and must only agree up to rounding.
-#}
{% test equals_recompute(model, compare_model, precision=6) %}
  {%- if execute -%}
    {%- set columns = adapter.get_columns_in_relation(model) -%}
  {%- else -%}
    {%- set columns = [] -%}
  {%- endif -%}
  {%- set exprs = [] -%}
  {%- for col in columns -%}
    {%- set name = adapter.quote(col.name) -%}
    {%- if col.dtype | lower in ['double', 'float', 'real'] -%}
      {%- do exprs.append('round(' ~ name ~ ', ' ~ precision ~ ') as ' ~ name) -%}
    {%- else -%}
      {%- do exprs.append(name) -%}
    {%- endif -%}
  {%- endfor -%}
  {%- set select_list = exprs | join(', ') if exprs else '*' -%}

with actual as (
    select {{ select_list }} from {{ model }}
),
expected as (
    select {{ select_list }} from {{ compare_model }}
),
missing as (
    select * from expected
    except all
    select * from actual
),
extra as (
    select * from actual
    except all
    select * from expected
)
select 'missing from stream table' as problem, * from missing
union all
select 'not in recompute' as problem, * from extra
{% endtest %}
