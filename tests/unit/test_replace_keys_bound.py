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
    # Nothing stored: the minimum.
    assert _engine(0)._replace_keys_bound(TARGET, keys) == spark_engine.REPLACE_KEYS_MIN
    # The 70 MB rollup at SF 10: its 29 k keys under the refresh functions replace (3.75 s where
    # the MERGE took 5.0 s), one more key per STORED_BYTES_PER_KEY.
    rollup = 69_840_064
    bound = _engine(rollup)._replace_keys_bound(TARGET, 29_460)
    assert bound == spark_engine.REPLACE_KEYS_MIN + rollup // spark_engine.STORED_BYTES_PER_KEY and 29_460 <= bound
    # A 10 MB result: 30 k keys go through a MERGE.
    assert _engine(10 * 2**20)._replace_keys_bound(TARGET, 30_000) < 30_000
    # The 60 M-row fact (1.7 GB): its 120 k keys under TPC-H's refresh functions replace.
    bound = _engine(1_704_633_513)._replace_keys_bound(TARGET, 120_553)
    assert bound == spark_engine.REPLACE_KEYS_MAX and 120_553 <= bound
