{{ customer_events_sql() }}
