# Both targets bootstrap .venv on a fresh machine; re-installs only when pyproject.toml changes.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The suite runs in two worker processes (pytest-xdist): most of it is single-threaded lowering.
TEST_WORKERS ?= 2

.PHONY: demo test bench clean

# torch first, pinned: anything unpinned would pull the multi-GB CUDA build. pip's own warnings (an index location
# this machine lacks, ...) go to the install log, shown only if the install fails.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	@echo "installing into $(VENV) (log: $(VENV)/install.log)"
	@$(PY) -m pip install -q torch==2.13.0 > $(VENV)/install.log 2>&1 || { cat $(VENV)/install.log; exit 1; }
	@$(PY) -m pip install -q -e '.[test,service,zoo,explain]' >> $(VENV)/install.log 2>&1 || { cat $(VENV)/install.log; exit 1; }
	@touch $(STAMP)

# A quick zoo on three targets, stock versus solver, side by side: two small CNNs, where the stage saves 2-3% of
# the NPU's cycles, and a ConvNeXt stack, where its layout saves 11% of them and, on XNNPACK, the transposes around
# its CPU LayerNorms.
# Where the Vulkan runtime plugin is named (LAYOUT_SOLVER_VULKAN_RUNTIME) the Vulkan rows also run both programs on
# the device (lavapipe without a GPU) and show their run times.
demo: $(STAMP)
	$(VENV)/bin/layout-solver zoo --models convnext_stack,ds_cnn,mobilenet_v1_025 --target ethos-u55-128,vulkan,xnnpack --jobs 2 --explain --out zoo-out/demo $(if $(LAYOUT_SOLVER_VULKAN_RUNTIME),--execute)

# Lint and format check first (ruff, pinned in the test extra), then the suite. The browser test needs Debian's chromium
# and the Vulkan execution tests a driver (both installed here when root on Debian); the Vulkan tests also need
# the ExecuTorch Vulkan runtime plugin, found through LAYOUT_SOLVER_VULKAN_RUNTIME.
test: $(STAMP)
	@scripts/ensure_vulkan_driver.sh
	@scripts/ensure_chromium.sh
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=30

bench: $(STAMP)
	$(PY) -m benchmarks.core.solver

clean:
	rm -rf $(VENV) build *.egg-info
