{{ customer_statuses_sql() }}
