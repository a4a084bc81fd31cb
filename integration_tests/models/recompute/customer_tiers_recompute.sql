{{ customer_tiers_sql(ref('customer_totals_recompute')) }}
