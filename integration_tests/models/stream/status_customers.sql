{{ status_customers_sql() }}
