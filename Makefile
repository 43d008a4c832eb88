# The course's two commands:  make course  (open the lessons)   make test  (run every test)
# Both create .venv and install what they need on first use: `make course` what the lessons need
# (lesson 16's transformers and TRL come with `make trl`), `make test` the instructor's tools and the tests' too.
# `make student`, `make site` and `make grade` add the instructor's tools only (and `make grade` lesson 16's TRL).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: course solutions trl test install install-course install-instructor check-submissions unit slow seeds lessons lessons-student browser site student refresh grade benchmark

# jupyterlab/overrides.json: JupyterLab defaults for the course's environment (widget state saved
# with the notebook, so a reopened lesson shows its sliders' last frame instead of "model not found")
define venv_with
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e ".$(if $(1),[$(1)])"
	mkdir -p $(VENV)/share/jupyter/lab/settings
	cp jupyterlab/overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
endef

# nbgrader's JupyterLab and server extensions are switched off: the course's JupyterLab is the
# students'; an instructor who grades in nbgrader's UI switches them on (docs/instructors.md).
define nbgrader_off
	for e in formgrader validate_assignment assignment_list course_list; do \
	    $(BIN)/jupyter server extension disable --sys-prefix nbgrader.server_extensions.$$e >/dev/null 2>&1 || exit 1; done
	$(BIN)/jupyter labextension disable --level=sys_prefix @jupyter/nbgrader >/dev/null 2>&1
endef

# each stamp is one install: .course the lessons' packages, .trl adds lesson 16's, .instructor the
# instructor's tools, .installed all of them and the tests' (each includes the lessons' own install)
install-course: $(VENV)/.course

$(VENV)/.course: pyproject.toml constraints.txt jupyterlab/overrides.json
	$(call venv_with,)
	touch $@

# lesson 16's transformers and TRL (about 0.5 GB), which the lessons' own install leaves out
trl: $(VENV)/.trl

$(VENV)/.trl: pyproject.toml constraints.txt jupyterlab/overrides.json
	$(call venv_with,trl)
	touch $(VENV)/.course $@

# nbval, nbclient, nbconvert, jupyter-server-mathjax and nbgrader, without the tests' tools
install-instructor: $(VENV)/.instructor

$(VENV)/.instructor: pyproject.toml constraints.txt jupyterlab/overrides.json
	$(call venv_with,instructor)
	$(nbgrader_off)
	touch $(VENV)/.course $@

install: $(VENV)/.installed

# verl is installed without its dependencies (it pins an older transformers and its own torch): the tests run
# its config checks and loss functions only (scale_out/verl_check.py); the dev extra has what those import.
$(VENV)/.installed: pyproject.toml constraints.txt jupyterlab/overrides.json
	$(call venv_with,dev)
	$(BIN)/pip install -q --no-deps verl==0.9.1
	$(nbgrader_off)
	touch $(VENV)/.course $(VENV)/.trl $(VENV)/.instructor $@

# the exercise versions, written once into exercises/ (a notebook there is never replaced: delete
# one for a fresh copy), lesson 00's opened in JupyterLab (LESSON=04 opens lesson 04's); `make
# solutions` opens the solved lessons in lessons/ instead
course: install-course
	$(BIN)/python -m minirl.course start $(if $(LESSON),--lesson $(LESSON))

solutions: install-course
	$(BIN)/python -m minirl.course start --solved $(if $(LESSON),--lesson $(LESSON))

# fast unit tests; the slow ones (training runs, live re-runs of recorded sweep points; an idle
# worker takes tests queued for the other, and the ten slowest are listed); every lesson under nbval
# at one thread with PyTorch's plain kernels (ATEN_CPU_CAPABILITY=default), which round unlike the
# AVX2 or AVX-512 kernels of the machine that stored the outputs, so a lesson that passes only on
# that CPU fails. Beside those three, from the start: the course in a real browser (the exercise
# versions students open, in JupyterLab, and the static site, in headless Chromium; skipped without
# Chromium), its output in build/browser.log, printed at the end: about one core for 6.5 minutes
# on a 2-core machine (docs/measurements.md).
test: install
	@mkdir -p build
	@$(MAKE) --no-print-directory browser > build/browser.log 2>&1 & browser=$$!; \
	$(MAKE) --no-print-directory -k unit slow lessons; others=$$?; \
	wait $$browser; status=$$?; \
	echo "---------------- make browser (build/browser.log), exit $$status"; cat build/browser.log; \
	[ $$others = 0 ] && [ $$status = 0 ]

unit: install
	$(BIN)/python -m pytest -n 2 -m "not slow and not browser" tests

slow: install
	MINIRL_PROGRESS=0 $(BIN)/python -m pytest -n 2 --dist worksteal --durations=10 -m "slow and not seeds" tests

# the further seeds of the recorded sweeps (lesson 12's GAIL, all six seeds, 5-10 CPU-minutes each; lesson 09's PPO pipeline, seeds 2-5; lesson 11's DPO, seed 2; lesson 14's PRM and ORM retrained on seed 1, about 10 minutes each); not in `make test`
seeds: install
	MINIRL_PROGRESS=0 $(BIN)/python -m pytest -n 2 --dist worksteal --durations=10 -m seeds tests

NBVAL := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MINIRL_PROGRESS=0 $(BIN)/python -m pytest -n 2 --dist loadfile --nbval

lessons: install
	ATEN_CPU_CAPABILITY=default $(NBVAL) lessons

# every lesson's exercise version (solutions stubbed; the stored outputs expected, each checker's PASS
# as FAIL) under nbval, on this CPU's kernels; not in `make test`, where the browser stage runs the
# slider lessons' exercise versions in full and a unit test checks that no cell reads what an
# exercise defines
lessons-student: install
	rm -rf build/student-check
	$(BIN)/python -m minirl.course student --with-outputs --out build/student-check
	$(NBVAL) build/student-check

# one worker: with two JupyterLabs side by side (-n 2) each test took about 1.5 times as long. On a
# loaded machine (two workers, or beside the other stages) a lesson reopened after its kernel was gone
# has shown "model not found" for its sliders, a race in JupyterLab's widget manager: the test reloads
# such a page once (tests/test_browser.py, check_widgets_after_reopening)
browser: install
	$(BIN)/python -m pytest -m browser tests

# the stored lessons and the guides in docs/ as a static HTML site in site/ (math typeset offline;
# open site/index.html), and the student-safe one (no solutions, no hunt answers) in site/student/
site: install-instructor
	$(BIN)/python -m minirl.course.site --out site
	$(BIN)/python -m minirl.course.site --student --out site/student

# exercise versions to hand out; a notebook already in student/ that differs is kept (FORCE=1
# replaces it: it passes --force, the same switch as `python -m minirl.course student --force`)
student: install-instructor
	$(BIN)/python -m minirl.course student --out student $(if $(FORCE),--force)

# run every submitted notebook and tabulate each exercise's verdict: make grade SUBMISSIONS=folder
# (lesson 16's submissions need its TRL); the folder is checked before anything is installed
grade: check-submissions install-instructor trl
	$(BIN)/python -m minirl.course grade "$(SUBMISSIONS)"

check-submissions:
	@if [ -z "$(SUBMISSIONS)" ]; then echo "make grade needs the folder of submitted notebooks: make grade SUBMISSIONS=folder"; exit 2; fi
	@if [ ! -d "$(SUBMISSIONS)" ]; then echo "make grade: there is no folder $(SUBMISSIONS) (SUBMISSIONS names the folder of submitted notebooks)"; exit 2; fi

refresh: install
	$(BIN)/python -m minirl.course refresh

benchmark: install
	$(BIN)/python benchmarks/sampler_vs_hf.py
	$(BIN)/python benchmarks/sampler_floor.py
	$(BIN)/python benchmarks/grpo_vs_trl.py
	$(BIN)/python benchmarks/dpo_vs_trl.py
	$(BIN)/python benchmarks/rlhf_ppo_step.py
	$(BIN)/python benchmarks/multiturn.py
