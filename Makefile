# make demo  -- build, change, refresh and test the example stream tables (integration_tests/)
# make test  -- the whole pytest suite (unit, Spark, dbt, adapter, drills, cluster), sized for CI
# make test-long -- the same with every repetition: more hypothesis examples, every kill point
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Reinstall when the package definition changes; the install is editable, so code changes
# need none.
STAMP := $(VENV)/.dbt-spark-stream-installed

.PHONY: demo lint test test-long install clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): setup.py | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

install: $(STAMP)

demo: install
	$(PY) integration_tests/scripts/demo.py

# make test runs every test module, on two pytest workers, with fewer repetitions than the
# long run (CI has 90 minutes on 2 cores): 1 hypothesis example per property, the `slow`
# property variants left out, 4 kill points drawn at random (printed) of the ~20, 4 race
# rounds, one refresh round per cluster method and the kill drill on the two refresh paths
# (connect, thrift_sql). make test-long runs every repetition (about 2 hours on 2 cores).
CI_TIER := DVM_HYPOTHESIS_EXAMPLES=1 DVM_DRILL_KILL_POINTS=4 DVM_DRILL_RACE_ROUNDS=4 \
	DVM_CLUSTER_REFRESH_ROUNDS=1 DVM_CLUSTER_KILL_METHODS=connect,thrift_sql

# Lint first (ruff.toml), then type-check (mypy.ini) the code and the test support, then pytest. pytest exits 5
# when it collected no test: that fails here too, never passes silently.
MYPY_PATHS := python_helpers dbt/adapters/spark_stream benchmarks tests/support

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy $(MYPY_PATHS)

test: lint
	$(CI_TIER) $(PY) -m pytest -n 2 --dist loadfile -m "not slow" $(PYTEST_ARGS)

test-long: lint
	$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf .work integration_tests/target integration_tests/logs .pytest_cache
