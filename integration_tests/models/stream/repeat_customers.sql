{{ repeat_customers_sql() }}
