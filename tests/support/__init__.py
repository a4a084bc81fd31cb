"""Test support shared by tests/spark (and usable by tests/dbt).

- spark_session.py  the one local SparkSession of a run (built like dbt-spark's session connection)
- oracle.py         assert_matches_recompute: stream table == its SQL recomputed on the sources
- sources.py        Delta source tables (deltalake) and change ops (insert/update/delete/...)
- strategies.py     hypothesis strategies for initial rows and change batches; settings
- shapes.py         the query shapes by operator family, deterministic smoke data and batches
- rotation.py       DVM_ROTATION: a share of the repeated items a day
- harness.py        StreamEnv / Stream: fresh schemas, refresh + check, run_cycles

Environment knobs:
  DVM_HYPOTHESIS_EXAMPLES        examples per property test (defaults 3-4; make test: 1)
  DVM_HYPOTHESIS_SLOW_EXAMPLES   examples for the `slow` tests (default 40; make test leaves them out)
  DVM_SHAPES=name,name           tests/spark smoke runs: only these shapes
  DVM_ROTATION, DVM_DAY          repetitions by the day (rotation.py): items with index % ROTATION == DAY % ROTATION
                                 (default 1: all; make test: 3); DAY defaults to today's date ordinal
  DVM_DRILL_RACE_ROUNDS          tests/drills race rounds (default 8; make test: 4)
  DVM_CLUSTER_REFRESH_ROUNDS     tests/cluster refresh rounds per method (default 2; make test: 1)
  DVM_TPCH_SF, DVM_TPCH_CYCLES   tests/tpch scale factor and cycles (default 0.01, 1)
  DVM_HYPOTHESIS_SHRINK=1        let hypothesis shrink a failure (slow: every step re-runs Spark)
  DVM_SPARK_LOG_LEVEL            Spark log level (default ERROR)
  DVM_SPARK_DRIVER_MEMORY        driver memory (default 2g)
  DBT_SPARK_STREAM_DELTA_JARS    directory of Delta Lake's jars for tests/spark_engine (default .venv/jars: make jars)
"""
