{{ shop_summary_sql() }}
