{{ customer_totals_sql() }}
