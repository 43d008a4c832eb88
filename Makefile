# The course's two commands:  make course  (open the lessons)   make test  (run every test)
# Both create .venv and install what they need on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: course test install unit slow lessons student refresh benchmark

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e ".[dev]"
	touch $@

# JupyterLab refuses to start as root (common in containers) unless told it may
course: install
	$(BIN)/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) lessons/00_welcome.ipynb

# fast unit tests, then the slow ones (training runs, student notebooks), then every lesson under
# nbval at one thread (as instructors run them); each stage on both cores
test: unit slow lessons

unit: install
	$(BIN)/python -m pytest -n 2 -m "not slow" tests

slow: install
	MINIRL_PROGRESS=0 $(BIN)/python -m pytest -n 2 -m slow tests

lessons: install
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MINIRL_PROGRESS=0 $(BIN)/python -m pytest -n 2 --dist loadfile --nbval lessons

student: install
	$(BIN)/python -m minirl.course student --out student

refresh: install
	$(BIN)/python -m minirl.course refresh

benchmark: install
	$(BIN)/python benchmarks/sampler_vs_hf.py
	$(BIN)/python benchmarks/sampler_floor.py
	$(BIN)/python benchmarks/grpo_vs_trl.py
