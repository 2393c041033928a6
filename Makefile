# The two set-up commands: `make demo` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit boundscheck test-spark-compat clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/quickstart.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q

# The columnar decoder's compiled loops (localstore.record.arrow) once more with numba's bounds
# checks on, so an index out of bounds raises instead of reading astray; in a cache of their
# own, as numba's cache does not tell checked code from unchecked.
boundscheck: $(STAMP)
	NUMBA_BOUNDSCHECK=1 NUMBA_CACHE_DIR=$(VENV)/numba-boundscheck \
		$(BIN)/python -m pytest -q -p no:cacheprovider tests/localstore/test_arrow_batch.py

test: lint typecheck unit boundscheck

# The Spark tests (tests/spark, the example's included) under an older pyspark than .venv's: the
# spark extra allows 4.0 through 4.3, and each minor version adds API the source uses when
# present (sdk/spark/pyspark_api.py). PYSPARK is a version prefix; its newest release is used:
#     make test-spark-compat PYSPARK=4.0
# The venv, .venv-pyspark-$(PYSPARK), is the project's dev install with that pyspark.
PYSPARK ?=
COMPAT_VENV := .venv-pyspark-$(PYSPARK)

$(COMPAT_VENV)/.installed: pyproject.toml
	@test -n "$(PYSPARK)" || { echo "give the pyspark version: make test-spark-compat PYSPARK=4.0"; exit 2; }
	$(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(COMPAT_VENV)/bin/python -m pip install --quiet -e '.[dev]' 'pyspark==$(PYSPARK).*'
	touch $@

test-spark-compat: $(COMPAT_VENV)/.installed
	$(COMPAT_VENV)/bin/python -c 'import pyspark; print("pyspark", pyspark.__version__)'
	$(COMPAT_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/spark

clean:
	rm -rf $(VENV) .venv-pyspark-* .pytest_cache .mypy_cache .ruff_cache
