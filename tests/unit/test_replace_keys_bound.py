"""How many keys the spark engine replaces by their row ids instead of a MERGE
(runtime/delta/spark/engine.py `_replace_keys_bound`): always the minimum, more in proportion to
the stored result's size (from the commits the refresh read, no Spark job), never past the maximum."""

from __future__ import annotations

from python_helpers.runtime.delta.spark import engine as spark_engine
from python_helpers.runtime.delta.spark.engine import SparkDelta

TARGET = "/warehouse/__dvm_stream_tables/fact"


def _engine(stored_bytes: int) -> SparkDelta:
    # No connection: a bound that needed a round trip (DESCRIBE DETAIL) would fail here.
    delta = SparkDelta(None)  # type: ignore[arg-type]
    delta._histories[TARGET] = [
        {
            "version": 0,
            "operation": "CREATE OR REPLACE TABLE AS SELECT",
            "operationMetrics": {"numOutputBytes": str(stored_bytes)},
        }
    ]
    return delta


def test_up_to_the_minimum_keys_replace_whatever_the_stored_result_holds():
    delta = SparkDelta(None)  # type: ignore[arg-type]  (its size is never asked)
    assert delta._replace_keys_bound(TARGET, 1) == spark_engine.REPLACE_KEYS_MIN
    assert delta._replace_keys_bound(TARGET, spark_engine.REPLACE_KEYS_MIN) == spark_engine.REPLACE_KEYS_MIN


def test_past_the_minimum_the_bound_follows_the_stored_size_up_to_the_maximum():
    keys = spark_engine.REPLACE_KEYS_MIN + 1
    # A 60 MB rollup: a MERGE of 30 k keys into it is cheaper than their list.
    assert _engine(60 * 2**20)._replace_keys_bound(TARGET, keys) == spark_engine.REPLACE_KEYS_MIN
    # 300 MB: one key per STORED_BYTES_PER_KEY.
    assert _engine(300 * 2**20)._replace_keys_bound(TARGET, keys) == 300 * 2**20 // spark_engine.STORED_BYTES_PER_KEY
    # The 60 M-row fact (4.9 GB): its 120 k keys under TPC-H's refresh functions replace.
    bound = _engine(4_900 * 2**20)._replace_keys_bound(TARGET, 120_553)
    assert bound == spark_engine.REPLACE_KEYS_MAX and 120_553 <= bound
