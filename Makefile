# make demo  -- build, change, refresh and test the example stream tables (integration_tests/)
# make demo-spark -- the same on a local Spark with Delta Lake loaded (engine: spark; fetches the jars)
# make test  -- the whole pytest suite (unit, Spark, dbt, adapter, drills, cluster), sized for CI
# make test-fast -- lint, types and the tests without a JVM: before each commit (under 2 minutes)
# make test-long -- the same as make test with every repetition: more hypothesis examples, every kill point
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Reinstall when the package definition changes; the install is editable, so code changes
# need none.
STAMP := $(VENV)/.dbt-spark-stream-installed

.PHONY: demo demo-spark lint test test-fast test-long install jars clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): setup.py | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

install: $(STAMP)

# Delta Lake for Spark (engine: spark): the jars a Spark needs, fetched once from Maven Central
# into the venv; nothing is fetched at run time. 4.4.0 is the release that works with pyspark
# 4.1.4 (4.1.0 and 4.2.0 are reported to break on Spark 4.1.2 and later).
DELTA_VERSION := 4.4.0
JARS := $(VENV)/jars
DELTA_JAR := $(JARS)/delta-spark_4.1_2.13-$(DELTA_VERSION).jar

$(DELTA_JAR): | $(PY)
	mvn -q dependency:copy -Dartifact=io.delta:delta-spark_4.1_2.13:$(DELTA_VERSION) -DoutputDirectory=$(JARS)
	mvn -q dependency:copy -Dartifact=io.delta:delta-storage:$(DELTA_VERSION) -DoutputDirectory=$(JARS)

jars: $(DELTA_JAR)

demo: install
	$(PY) integration_tests/scripts/demo.py

demo-spark: install jars
	$(PY) integration_tests/scripts/demo.py --engine spark

# make test runs on two pytest workers (files that share a fixture stay on one: xdist_group) the
# tests marked every_run and a fifth of the others, a different fifth each hour (DVM_SHARE=5,
# DVM_TURN repeats a run's; tests/support/rotation.py), with fewer repetitions than the long
# run: 1 hypothesis example per property (a new one each run), the `slow` property variants
# left out, and a sixth of the repeated items in a rotation by the day (every item runs at
# least once in six days; the log says which, and DVM_DAY repeats a day): each family's smoke
# shapes, the spark engine's shapes, the cluster's methods, the dbt refresh rounds, the TPC-H
# queries; 2 of the kill drill's 24 points a day (all within twelve days; a point with Spark in the killed process on two days of
# six), 4 race rounds and one refresh round per cluster method; dbt's `merge` suite on the
# spark engine on one day of six. `slow` tests (the bigger hypothesis runs, dbt's snapshot
# suites on Delta, the class archive) run in make test-long only.
# make test-long runs every repetition. The budget: DEVELOPERS.md.
CI_TIER := DVM_HYPOTHESIS_EXAMPLES=1 DVM_ROTATION=6 DVM_SHARE=5 DVM_DRILL_RACE_ROUNDS=4 DVM_DRILL_KILL_POINTS=2 DVM_CLUSTER_REFRESH_ROUNDS=1

# Lint first (ruff.toml), then type-check (mypy.ini) the code and the test support, then pytest. pytest exits 5
# when it collected no test: that fails here too, never passes silently.
MYPY_PATHS := python_helpers dbt/adapters/spark_stream benchmarks tests/support

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy $(MYPY_PATHS)

test: lint jars
	$(CI_TIER) $(PY) -m pytest -n 2 --dist loadgroup -m "not slow" --durations=30 $(PYTEST_ARGS)

# No JVM: the unit tests, the SQL of every operator shape, dbt parsing the example project.
FAST_TESTS := tests/unit tests/dbt/test_dbt_project_parse.py

test-fast: lint
	$(PY) -m pytest -q $(FAST_TESTS) $(PYTEST_ARGS)

test-long: lint jars
	$(PY) -m pytest --durations=30 $(PYTEST_ARGS)

clean:
	rm -rf .work integration_tests/target integration_tests/logs .pytest_cache
