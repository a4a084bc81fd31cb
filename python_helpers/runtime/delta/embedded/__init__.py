"""The embedded Delta engine: Delta logs and commits through `deltalake` (delta-rs) in the dbt
process, data read by Spark from the parquet files of pinned versions, results published as
catalog views over generation directories."""
