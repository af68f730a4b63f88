# amp-hls: one-command setup, test and demo. Everything installs from this repository's own files.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
EXTRAS := dev,data,plot,mpi,qm9
STAMP  := $(VENV)/.installed

.PHONY: setup test demo lint clean bench-quick bench

setup: $(STAMP)

# Re-install whenever the project's metadata changes; a plain re-run is a no-op (idempotent).
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	@touch $@

test: setup
	$(BIN)/python -m pytest -q

demo: setup
	$(BIN)/amp-hls demo

lint: setup
	$(BIN)/ruff check amp_hls tests bench

# Async vs sync ratios measured side by side; writes bench/results/quick.json (full.json).
bench-quick: setup
	$(BIN)/python -m bench.run --quick

bench: setup
	$(BIN)/python -m bench.run --full

clean:
	rm -rf $(VENV) build dist .pytest_cache .ruff_cache .hypothesis
