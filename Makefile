# Two commands: `make demo` trains the quickstart, `make test` runs the test suite.
# Each creates .venv (if missing) and installs the project with its dev extras into it.
# `make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu` installs PyTorch's CPU-only build
# first (PyPI's torch for Linux brings the CUDA libraries: several GB).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_INDEX ?=

.PHONY: demo test lint format clean gpu-check

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(if $(TORCH_INDEX),$(BIN)/python -m pip install --quiet torch torchvision --index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

# the main job in a minute: Forward and Forward-VRNL on the same noisy labels (configs/sweeps/
# demo.yaml), their clean test accuracy at the selected checkpoint and at the last epoch, and the
# loss of mislabeled vs correctly labeled samples per epoch; a second `make demo` reuses the runs
demo: $(STAMP)
	$(BIN)/noisylabels sweep configs/sweeps/demo.yaml --parallel 2
	$(BIN)/noisylabels report runs/demo --metric best,last --title "Forward vs Forward-VRNL, 40 % symmetric noise on the digits (one seed)"
	$(BIN)/noisylabels plot runs/demo/forward runs/demo/forward_vrnl --out runs/demo/losses.png
	@echo "How to read it: each panel of runs/demo/losses.png is the average training loss of the correctly"
	@echo "labeled (blue) and the mislabeled (orange) samples per epoch. VRNL weights each sample's gradient by"
	@echo "1 + 2*alpha*(mean loss - its loss), so it widens the gap between the two curves (the mislabeled samples"
	@echo "stay less fitted) and the last epoch keeps more of the selected checkpoint's accuracy; one seed here,"
	@echo "docs/results.md has the paper's runs. The noisy-validation accuracy the runs log (about 0.5) is measured"
	@echo "against noisy labels, 40 % of them wrong: a model that predicts every clean class scores about 0.6"
	@echo "there; the clean test accuracy is the one that counts."
	@echo "The noisylabels command is $(BIN)/noisylabels; 'source $(BIN)/activate' puts it on PATH."

# two worker processes of one thread each: the tests' networks are tiny, so one thread per
# process is faster than two, and two processes use both cores of a small machine
test: $(STAMP)
	@echo "make test: the fast suite, about 1,800 tests: 3 to 4 minutes on 2 idle cores, 12 beside two training"
	@echo "runs. Its 2 worker processes first import torch and Lightning and collect the tests, then print a dot per test."
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -m "not slow" -q -n 2 --dist worksteal

# the GPU acceptance check (benchmarks/gpu_check.py): on a CUDA GPU at most 8 minutes and one
# table, also written to runs/gpu-check.json (or GPU_CHECK_JSON=file.json); without CUDA a dry
# run that lists its steps. DATA=folder holding MNIST/raw adds the MNIST step. It runs with
# .venv's python where there is one, else with python3 as it is (a GPU machine with the
# dependencies and no network).
GPU_PYTHON = $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
GPU_CHECK_ARGS = $(if $(DATA),--data-dir $(DATA)) $(if $(GPU_CHECK_JSON),--out $(GPU_CHECK_JSON))
gpu-check:
	$(GPU_PYTHON) benchmarks/gpu_check.py $(GPU_CHECK_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

clean:
	rm -rf runs .pytest_cache .ruff_cache
