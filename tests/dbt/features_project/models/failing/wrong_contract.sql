select category, count(*) as n
from {{ source('feat', 'items') }}
group by category
