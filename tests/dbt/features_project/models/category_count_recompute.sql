{{ config(materialized='view') }}
select count(*) as categories, sum(n) as items from {{ ref('category_totals') }}
