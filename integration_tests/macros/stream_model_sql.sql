{#-
  The SQL of every stream table, written once: models/stream/<name>.sql materializes it as a
  stream table, models/recompute/<name>_recompute.sql as a plain view (the oracle the
  equals_recompute test compares against).
-#}

{# README example: count / sum per group. #}
{% macro customer_totals_sql() %}
select
    customer_id,
    count(*) as order_count,
    sum(amount) as total_amount
from {{ source('shop', 'orders') }}
group by customer_id
{% endmacro %}


{# Filter + project: CASE, COALESCE, casts, date functions. #}
{% macro order_facts_sql() %}
select
    order_id,
    customer_id,
    case
        when amount is null then 'unknown'
        when amount >= 150 then 'large'
        when amount >= 50 then 'medium'
        else 'small'
    end as size_band,
    coalesce(discount, 0.0) as discount,
    cast(amount as double) as amount_double,
    cast(quantity as string) as quantity_text,
    year(order_date) as order_year,
    date_trunc('MONTH', order_date) as order_month,
    date_add(order_date, 14) as due_date,
    datediff(order_date, date'2024-01-01') as days_since_launch
from {{ source('shop', 'orders') }}
where status <> 'cancelled'
{% endmacro %}


{# Two-table inner join, aggregated by a column of the joined side. #}
{% macro region_stats_sql() %}
select
    c.region,
    count(*) as order_count,
    avg(o.amount) as avg_amount,
    min(o.amount) as min_amount,
    max(o.amount) as max_amount,
    stddev(o.amount) as stddev_amount
from {{ source('shop', 'orders') }} as o
join {{ source('shop', 'customers') }} as c
    on o.customer_id = c.customer_id
group by c.region
{% endmacro %}


{% macro customer_statuses_sql() %}
select distinct customer_id, status
from {{ source('shop', 'orders') }}
{% endmacro %}


{% macro customer_events_sql() %}
select customer_id, 'order' as event_type, order_date as event_date
from {{ source('shop', 'orders') }}
union all
select customer_id, 'signup' as event_type, signup_date as event_date
from {{ source('shop', 'customers') }}
{% endmacro %}


{# Scalar aggregate: no GROUP BY, exactly one row even when the source is empty. #}
{% macro shop_summary_sql() %}
select
    count(*) as order_count,
    sum(amount) as revenue,
    max(order_date) as latest_order_date
from {{ source('shop', 'orders') }}
{% endmacro %}


{% macro status_customers_sql() %}
select status, count(distinct customer_id) as customers
from {{ source('shop', 'orders') }}
group by status
{% endmacro %}


{% macro repeat_customers_sql() %}
select customer_id, sum(amount) as spend, count(*) as order_count
from {{ source('shop', 'orders') }}
group by customer_id
having count(*) >= 5
{% endmacro %}


{# A CTE feeding a subquery in FROM. #}
{% macro monthly_big_orders_sql() %}
with big_orders as (
    select customer_id, order_date, amount
    from {{ source('shop', 'orders') }}
    where amount > 100
)
select month, count(*) as big_orders, sum(amount) as big_amount
from (
    select date_trunc('MONTH', order_date) as month, amount
    from big_orders
) as monthly
group by month
{% endmacro %}


{# Top-K: the stored result is the grouped query; the view shows its first 3 rows. #}
{% macro top_customers_sql() %}
select customer_id, sum(amount) as spend
from {{ source('shop', 'orders') }}
where customer_id is not null and amount is not null
group by customer_id
order by spend desc, customer_id
limit 3
{% endmacro %}


{# Window function: only the touched partitions are recomputed (here one partition: all). #}
{% macro spend_rank_sql() %}
select customer_id, spend, rank() over (order by spend desc) as spend_rank
from (
    select customer_id, sum(amount) as spend
    from {{ source('shop', 'orders') }}
    where customer_id is not null and amount is not null
    group by customer_id
) t
{% endmacro %}


{# ROLLUP: expanded into one GROUP BY branch per grouping set. #}
{% macro status_rollup_sql() %}
select status, count(*) as orders, sum(amount) as amount
from {{ source('shop', 'orders') }}
group by rollup(status)
{% endmacro %}


{# EXISTS inside OR: split into disjoint UNION ALL branches, then an anti join. #}
{% macro lapsed_or_north_sql() %}
select c.customer_id, c.region
from {{ source('shop', 'customers') }} c
where c.region = 'north'
   or not exists (select 1 from {{ source('shop', 'orders') }} o where o.customer_id = c.customer_id)
{% endmacro %}


{# A scalar subquery in the SELECT list of a grouped query: joined, and grouped by. #}
{% macro status_share_sql() %}
select
    status,
    count(*) as orders,
    count(*) / (select count(*) from {{ source('shop', 'orders') }}) as share
from {{ source('shop', 'orders') }}
group by status
{% endmacro %}


{# IN (subquery) used as a value: a COUNT of the matches per customer (TRUE / FALSE, as Spark computes it). #}
{% macro north_flags_sql() %}
select
    o.order_id,
    o.customer_id in (
        select c.customer_id from {{ source('shop', 'customers') }} c where c.region = 'north'
    ) as north_customer
from {{ source('shop', 'orders') }} o
{% endmacro %}


{# A subquery correlated by a non-equality (o2.amount > o.amount) is outside the differential
   set: under refresh_mode='auto' this refreshes in full every time and says why. #}
{% macro larger_orders_sql() %}
select
    o.order_id,
    o.amount,
    (select count(*) from {{ source('shop', 'orders') }} o2 where o2.amount > o.amount) as larger_orders
from {{ source('shop', 'orders') }} o
{% endmacro %}


{# WITH RECURSIVE: from each gold customer, the run of following customer ids in the same
   region (up to 3 steps); maintained by semi-naive evaluation of the change. #}
{% macro customer_chains_sql() %}
with recursive chain (root, customer_id, region, depth) as (
    select customer_id, customer_id, region, 0
    from {{ source('shop', 'customers') }}
    where tier = 'gold'
    union all
    select chain.root, c.customer_id, c.region, chain.depth + 1
    from chain
    join {{ source('shop', 'customers') }} c
      on c.customer_id = chain.customer_id + 1 and c.region = chain.region
    where chain.depth < 3
)
select root, count(*) as chain_length, max(depth) as depth
from chain
group by root
{% endmacro %}


{# Reads a dbt view model: maintained over the view's base table (view inlining). #}
{% macro paid_order_stats_sql(orders) %}
select customer_id, count(*) as paid_orders, sum(amount) as paid_amount
from {{ orders }}
group by customer_id
{% endmacro %}


{# Reads another stream table: its stored table's change feed is this one's input. #}
{% macro customer_tiers_sql(totals) %}
select
    case when total_amount >= 300 then 'gold' when total_amount >= 100 then 'silver' else 'bronze' end as tier,
    count(*) as customers,
    sum(order_count) as orders
from {{ totals }}
group by 1
{% endmacro %}
