{{ paid_order_stats_sql(ref('stg_paid_orders')) }}
