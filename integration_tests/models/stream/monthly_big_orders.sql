{{ monthly_big_orders_sql() }}
