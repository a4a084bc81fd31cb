-- depends_on: {{ ref('customer_totals') }}
-- (a plain view over the source: built after a stream table, whose refresh registers the source views)
select order_id, customer_id, amount
from {{ source('shop', 'orders') }}
where status <> 'cancelled' and amount is not null
