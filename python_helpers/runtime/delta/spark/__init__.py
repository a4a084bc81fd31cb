"""The spark Delta engine: Delta Lake SQL inside Spark (`table_changes`, `VERSION AS OF`,
`MERGE INTO`), for clusters whose Spark has Delta Lake."""
