# The course's two commands:  make course  (open the lessons)   make test  (run every test)
# Both create .venv and install what they need on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: course test install unit slow seeds lessons lessons-other-cpu browser site student refresh benchmark

install: $(VENV)/.installed

# verl's wheel is downloaded, not installed: tests/test_scale_out.py reads its config files only.
# jupyterlab/overrides.json: JupyterLab defaults for the course's environment (widget state saved
# with the notebook, so a reopened lesson shows its sliders' last frame instead of "model not found")
$(VENV)/.installed: pyproject.toml constraints.txt jupyterlab/overrides.json
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e ".[dev]"
	$(BIN)/pip download -q --no-deps verl==0.9.1 -d $(VENV)/wheels
	mkdir -p $(VENV)/share/jupyter/lab/settings
	cp jupyterlab/overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
	touch $@

# JupyterLab refuses to start as root (common in containers) unless told it may
course: install
	$(BIN)/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) lessons/00_welcome.ipynb

# fast unit tests; the slow ones (training runs, live re-runs of recorded sweep points; an idle
# worker takes tests queued for the other, and the ten slowest are listed); every lesson under nbval
# at one thread, as instructors run them; every lesson's student version under nbval with PyTorch's
# kernels for another processor, so a lesson that passes only on the CPU that stored it fails here;
# then the course in a real browser: JupyterLab and the static site in headless Chromium (skipped
# without Chromium). Each stage uses both cores.
test: unit slow lessons lessons-other-cpu browser

unit: install
	$(BIN)/python -m pytest -n 2 -m "not slow and not browser" tests

slow: install
	MINIRL_PROGRESS=0 $(BIN)/python -m pytest -n 2 --dist worksteal --durations=10 -m "slow and not seeds" tests

# the further seeds of the recorded sweeps (GAIL's seeds 1 and 2: 10-19 CPU-minutes by machine); not in `make test`
seeds: install
	MINIRL_PROGRESS=0 $(BIN)/python -m pytest -n 2 --dist worksteal --durations=10 -m seeds tests

NBVAL := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MINIRL_PROGRESS=0 $(BIN)/python -m pytest -n 2 --dist loadfile --nbval

lessons: install
	$(NBVAL) lessons

# every lesson's student version (solutions stubbed; the stored outputs expected, each checker's PASS
# as FAIL) under nbval with PyTorch's kernels for another processor (ATEN_CPU_CAPABILITY): AVX2's on
# a machine with AVX-512, else the plain ones, which round differently from both
OTHER_CPU ?= $(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo avx2 || echo default)
lessons-other-cpu: install
	rm -rf build/student-check
	$(BIN)/python -m minirl.course student --with-outputs --out build/student-check
	ATEN_CPU_CAPABILITY=$(OTHER_CPU) $(NBVAL) build/student-check

browser: install
	$(BIN)/python -m pytest -m browser tests

# the stored lessons as a static HTML site in site/ (math typeset offline; open site/index.html)
site: install
	$(BIN)/python -m minirl.site --out site

student: install
	$(BIN)/python -m minirl.course student --out student

refresh: install
	$(BIN)/python -m minirl.course refresh

benchmark: install
	$(BIN)/python benchmarks/sampler_vs_hf.py
	$(BIN)/python benchmarks/sampler_floor.py
	$(BIN)/python benchmarks/grpo_vs_trl.py
	$(BIN)/python benchmarks/dpo_vs_trl.py
	$(BIN)/python benchmarks/rlhf_ppo_step.py
