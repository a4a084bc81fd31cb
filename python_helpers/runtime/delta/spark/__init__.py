"""The spark Delta engine: Delta Lake SQL inside Spark (`table_changes`, `VERSION AS OF`,
`INSERT INTO ... REPLACE WHERE`, `MERGE INTO`), for clusters whose Spark has Delta Lake."""
