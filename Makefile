# Two commands: `make demo` trains the quickstart, `make test` runs the test suite.
# Each creates .venv (if missing) and installs the project with its dev extras into it.
# `make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu` installs PyTorch's CPU-only build
# first (PyPI's torch for Linux brings the CUDA libraries: several GB).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_INDEX ?=

.PHONY: demo test lint format clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(if $(TORCH_INDEX),$(BIN)/python -m pip install --quiet torch torchvision --index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/noisylabels fit --config configs/quickstart.yaml
	@echo "The noisylabels command is $(BIN)/noisylabels; 'source $(BIN)/activate' puts it on PATH."

# two worker processes of one thread each: the tests' networks are tiny, so one thread per
# process is faster than two, and two processes use both cores of a small machine
test: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -m "not slow" -q -n 2 --dist worksteal

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

clean:
	rm -rf runs .pytest_cache .ruff_cache
