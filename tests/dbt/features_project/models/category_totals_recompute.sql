-- depends_on: {{ ref('category_totals') }}
{{ config(materialized='view') }}
select category, count(*) as n, sum(amount) as total
from {{ source('feat', 'items') }}
group by category
