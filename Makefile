# The two commands: `make demo` and `make test`. Each sets up what it needs and is safe to repeat.
# `make check` is the inner loop: lint, types and the tests that need no service, in minutes.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The venv is rebuilt only when what it is made from changes.
INPUTS_HASH := $(shell cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
STAMP  := $(VENV)/.installed-$(INPUTS_HASH)
EXTRAS := pytorch,onnxruntime,openvino,jax,llamacpp,tensorflow,litert,postgresql,mongodb,farm,otlp,docker,datasets,pretrained,generate,plots,dev
# llama-cpp-python compiles llama.cpp when pip installs it (minutes; pip keeps the wheel it built):
# for any x86-64 CPU, not only this one, and without llama.cpp's own tests, examples and server. The
# flags are those its predictor image's wheel is built with (ops/images/llamacpp.requirements.txt),
# so the wheel pip keeps is the one `mlscope image build llamacpp` takes from pip's cache.
LLAMA_CMAKE_ARGS ?= $(shell sed -n 's/^\# host build env: CMAKE_ARGS=//p' ops/images/llamacpp.requirements.txt)
# Only mlscope's own lines by default; V=1 echoes each command and shows pip's output (its warnings too).
Q    := $(if $(filter 1,$(V)),,@)
PIPQ := $(if $(filter 1,$(V)),,--quiet --quiet)
# When this make started, for the wall time `make test` and `make check` print as their last line.
START   := $(shell date +%s)
ELAPSED  = @s=$$(( $$(date +%s) - $(START) )); echo "make $@: $$((s / 60)) min $$((s % 60)) s"

.PHONY: demo test check lint typecheck unit services docker bench clean gpu-wheelhouse
# The dashboard's chart library, vendored from npm at build time (ops/dashboard; not committed).
VENDORED := mlscope/api/dashboard/static/vendor/plotly-basic.min.js

# `make demo` needs PyTorch and ONNX Runtime only. On a machine without the full venv it installs
# just those (a minute or two) instead of every framework the tests need (many minutes, llama.cpp
# compiled); `make test`, `make check` and `make venv` add the rest to the same venv later.
DEMO_EXTRAS := pytorch,onnxruntime
DEMO_STAMP  := $(VENV)/.installed-demo-$(INPUTS_HASH)
DEMO_VENV   := $(if $(wildcard $(STAMP)),$(STAMP),$(DEMO_STAMP))

# $(call install,EXTRAS,WHAT): the venv made if missing, mlscope installed in it with EXTRAS.
define install
	@echo "venv: installing mlscope and $(2) into $(VENV) (minutes the first time; V=1 shows pip)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(Q)$(BIN)/python -m pip install $(PIPQ) --upgrade pip setuptools wheel
	$(Q)CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install $(PIPQ) -c constraints.txt -e '.[$(1)]'
endef

$(STAMP):
	$(call install,$(EXTRAS),every dependency of the tests)
	@rm -f $(VENV)/.installed-*
	@touch $@

$(DEMO_STAMP):
	$(call install,$(DEMO_EXTRAS),the demo's PyTorch and ONNX Runtime)
	@rm -f $(VENV)/.installed-demo-*
	@touch $@

venv: $(STAMP) $(VENDORED)

$(VENDORED): ops/dashboard/package-lock.json
	@bash ops/dashboard/vendor.sh

demo: $(DEMO_VENV)
	@# A store left by an older mlscope is upgraded (a copy kept beside it); a current one is untouched.
	$(Q)$(BIN)/mlscope store upgrade
	@# Exit code 3: the runs succeeded but a result is not valid on this (busy) machine; the table
	@# says why, and the demo goes on to list the results.
	$(Q)$(BIN)/mlscope run resnet18 --framework pytorch,onnxruntime --batch-sizes 1,8 || test $$? -eq 3
	$(Q)$(BIN)/mlscope results list --limit 10

lint: $(STAMP)
	$(Q)$(BIN)/ruff check .
	$(Q)$(BIN)/ruff format --check .
	$(Q)$(BIN)/lint-imports
	@# Modules over the soft size limit, as warnings (it always exits 0).
	$(Q)$(BIN)/python ops/module_sizes.py

# mypy's incremental cache lives with the user's caches, not in the checkout, so a fresh clone (CI's)
# checks against what an earlier one learnt: mypy takes a cached module only when its source's hash
# matches (a moved checkout or venv is re-hashed, not re-checked), so the verdict is the same.
MYPY_CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/mlscope/mypy
typecheck: export MYPY_CACHE_DIR := $(MYPY_CACHE_DIR)
typecheck: $(STAMP)
	$(Q)$(BIN)/mypy

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
test: export PYTHONDONTWRITEBYTECODE =
test: $(STAMP) $(VENDORED) services docker lint typecheck
	$(Q)$(BIN)/python -m pytest -q --durations=25 -n $(TEST_WORKERS) --dist loadscope -m "not quiet"
	$(Q)$(BIN)/python -m pytest -q -n 0 -m quiet
	$(ELAPSED)

# The fast tests that need no service: it runs with Redis, PostgreSQL, RabbitMQ and Docker stopped. On
# `make test`'s two workers, then the `quiet` ones alone, collected from the modules that mark them.
# Python keeps its compiled modules (and pytest its rewritten tests) in __pycache__ even where the
# environment says not to, here and in `make test`: compiling every module again would be most of each
# run's start-up, and of each of the hundreds of processes the tests start.
UNIT_MARKERS := not slow and not postgres and not redis and not rabbitmq and not docker and not browser and not gpu
# The modules with a quiet test, less those whose every test is slow (make unit deselects them all, and
# tests/conftest.py leaves them uncollected only where no path is named).
QUIET_MODULES = $(shell $(BIN)/python -m tests.fixtures.slow_modules tests)
unit: export PYTHONDONTWRITEBYTECODE =
unit: $(STAMP)
	$(Q)$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadscope -m "$(UNIT_MARKERS) and not quiet"
	$(Q)$(BIN)/python -m pytest -q -n 0 -m "$(UNIT_MARKERS) and quiet" $(QUIET_MODULES) || test $$? -eq 5

# The inner loop: lint, types and the unit tests, with no service and no image (docs/architecture.md).
check: lint typecheck unit
	$(ELAPSED)

# The GPU check's wheelhouse (docs/gpu.md): mlscope's dependencies as wheels for the GPU machine's
# Python, which reaches no package registry; `bash ops/ci/gpu-smoke.sh` installs from it there.
gpu-wheelhouse:
	@PYTHON=$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)) bash ops/ci/gpu-wheelhouse.sh

bench: $(STAMP)
	$(Q)$(BIN)/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
