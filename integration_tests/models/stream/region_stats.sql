{{ region_stats_sql() }}
