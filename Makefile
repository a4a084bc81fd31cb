# make demo  -- build, change, refresh and test the example stream tables (integration_tests/)
# make test  -- the whole pytest suite: unit, Spark and dbt end-to-end tests
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Reinstall when the package definition changes; the install is editable, so code changes
# need none.
STAMP := $(VENV)/.dbt-spark-stream-installed

.PHONY: demo test install clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): setup.py | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

install: $(STAMP)

demo: install
	$(PY) integration_tests/scripts/demo.py

# The slow property suites run with a few examples, as in CI (the whole suite takes about an hour on 2 cores);
# DVM_HYPOTHESIS_SLOW_EXAMPLES=40 make test is the long run.
export DVM_HYPOTHESIS_SLOW_EXAMPLES ?= 3

# Lint first (ruff.toml), then type-check (mypy.ini) the code and the test support, then pytest. pytest exits 5
# when it collected no test: that fails here too, never passes silently.
MYPY_PATHS := python_helpers dbt/adapters/spark_stream benchmarks tests/support

test: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy $(MYPY_PATHS)
	$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf .work integration_tests/target integration_tests/logs .pytest_cache
