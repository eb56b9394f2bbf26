# The two commands: `make demo` and `make test`. Each sets up what it needs and is safe to repeat.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The venv is rebuilt only when what it is made from changes.
INPUTS_HASH := $(shell cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
STAMP  := $(VENV)/.installed-$(INPUTS_HASH)
EXTRAS := pytorch,onnxruntime,tensorflow,postgresql,mongodb,farm,otlp,docker,datasets,pretrained,generate,plots,dev

.PHONY: demo test lint typecheck unit services docker bench clean gpu-wheelhouse
# The dashboard's chart library, vendored from npm at build time (ops/dashboard; not committed).
VENDORED := mlscope/api/dashboard/static/vendor/plotly-basic.min.js

$(STAMP):
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[$(EXTRAS)]'
	@rm -f $(VENV)/.installed-*
	@touch $@

venv: $(STAMP) $(VENDORED)

$(VENDORED): ops/dashboard/package-lock.json
	@bash ops/dashboard/vendor.sh

demo: $(STAMP) $(VENDORED)
	@# A store left by an older mlscope is upgraded (a copy kept beside it); a current one is untouched.
	$(BIN)/mlscope store upgrade
	@# Exit code 3: the runs succeeded but a result is not valid on this (busy) machine; the table
	@# says why, and the demo goes on to list the results.
	$(BIN)/mlscope run resnet18 --framework pytorch,onnxruntime --batch-sizes 1,8 || test $$? -eq 3
	$(BIN)/mlscope results list --limit 10

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	@# Modules over the soft size limit, as warnings (it always exits 0).
	$(BIN)/python ops/module_sizes.py

typecheck: $(STAMP)
	$(BIN)/mypy

services:
	@bash ops/ci/services.sh
	@bash ops/ci/browser.sh

# A Docker engine, the offline base image, the predictor images and the compose stack's images with
# docker-compose (each step skipped when done).
docker: $(STAMP)
	@bash ops/ci/docker.sh && bash ops/ci/images.sh && bash ops/ci/compose.sh

# Two pytest-xdist workers: the tests that share a fixed Redis database or the host's measuring turn
# run in one scope, one after another (tests/conftest.py's scheduler); the rest fill the other worker.
# Then the `quiet` tests, which hold the tool's timing to a known truth, run alone: on two cores a
# parallel test's load would be measured as the tool's error.
TEST_WORKERS ?= 2
test: $(STAMP) $(VENDORED) services docker lint typecheck
	$(BIN)/python -m pytest -q --durations=25 -n $(TEST_WORKERS) --dist loadscope -m "not quiet"
	$(BIN)/python -m pytest -q -n 0 -m quiet

# The fast tests that need no service: it runs with Redis, PostgreSQL, RabbitMQ and Docker stopped.
unit: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not postgres and not redis and not rabbitmq and not docker and not browser and not gpu"

# The GPU check's wheelhouse (docs/gpu.md): mlscope's dependencies as wheels for the GPU machine's
# Python, which reaches no package registry; `bash ops/ci/gpu-smoke.sh` installs from it there.
gpu-wheelhouse:
	@PYTHON=$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)) bash ops/ci/gpu-wheelhouse.sh

bench: $(STAMP)
	$(BIN)/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
