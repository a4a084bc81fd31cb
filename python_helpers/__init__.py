"""dbt-spark-stream engine: parse, differentiate and refresh stream tables. Imports nothing from dbt."""
