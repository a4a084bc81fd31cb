{{ config(materialized='stream_table', refresh_mode='differential') }}
select category, count(*) as n, sum(amount) as total
from {{ source('feat', 'items') }}
group by category
