{{ config(grants={'select': ['reporting']}) }}
select category, sum(amount) as total
from {{ source('feat', 'items') }}
group by category
