{{ order_facts_sql() }}
