"""SQL text the Thrift binding sends, parsed by Spark's own parser (a Thrift server runs exactly
this text): a setting whose value holds semicolons, quotes, backquotes and JSON, as the spark
engine's commit metadata does (`spark.databricks.delta.commitInfo.userMetadata`)."""

from __future__ import annotations

import json

from python_helpers.runtime.connections.thrift import set_statement


def test_a_setting_holding_refresh_metadata_round_trips(spark):
    value = json.dumps(
        {
            "reason": "column v of source s.t changed type from int to bigint; the stored state no longer fits it",
            "quoted": 'it\'s a `name` with "quotes" = 1;',
            "nested": {"a": [1, 2]},
        }
    )
    key = "dbt_spark_stream.test.metadata"
    spark.sql(set_statement(key, value))
    try:
        assert spark.conf.get(key) == value
    finally:
        spark.conf.unset(key)
