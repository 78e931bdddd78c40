# The two commands of the README: `make test` and `make demo`. Both create or reuse .venv at the repository
# root, install tolk-core and the three plugins in editable mode, and make sure an OpenCL platform exists.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.tolk-installed
DEMO_STAMP := $(VENV)/.tolk-demo-installed

.PHONY: test demo install opencl lint clean

test: install opencl lint
	$(BIN)/pytest --durations=20

demo: install opencl $(DEMO_STAMP)
	$(BIN)/tolk devices --check
	$(BIN)/tolk demo
	TOLK_DEVICE=OPENCL $(BIN)/tolk demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports

install: $(STAMP)

$(BIN)/python:
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "tolk needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml plugins/tolk_cpu/pyproject.toml plugins/tolk_opencl/pyproject.toml plugins/tolk_cuda/pyproject.toml
	$(BIN)/pip install -q -e '.[test]' -e plugins/tolk_cpu -e plugins/tolk_opencl
	$(BIN)/pip install -q -e 'plugins/tolk_cuda[nvrtc]' || { \
	  echo "tolk: NVRTC wheel unavailable; installing tolk-cuda without it (nvcc is used when present)"; \
	  $(BIN)/pip install -q -e plugins/tolk_cuda; }
	touch $@

# the training demo's extra (scikit-learn)
$(DEMO_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[demo]'
	touch $@

# Debian's PoCL works with pyopencl; PyPI's pocl-binary-distribution does not build kernels on these CPUs.
opencl: install
	@if $(BIN)/python -c 'import pyopencl as cl, sys; sys.exit(0 if cl.get_platforms() else 1)' >/dev/null 2>&1; then \
	  true; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  echo "tolk: no OpenCL platform found; installing Debian's pocl-opencl-icd"; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q pocl-opencl-icd; \
	elif command -v apt-get >/dev/null && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then \
	  echo "tolk: no OpenCL platform found; installing Debian's pocl-opencl-icd with sudo"; \
	  sudo DEBIAN_FRONTEND=noninteractive apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q pocl-opencl-icd; \
	else \
	  echo "tolk: no OpenCL platform found and cannot install one (needs root or sudo with apt-get)."; \
	  echo "      Install an OpenCL driver, e.g. 'apt-get install pocl-opencl-icd' on Debian/Ubuntu."; \
	  echo "      Until then OPENCL is unavailable and its tests are skipped."; \
	fi

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
