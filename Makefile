# Two commands: `make demo` sets up and runs the demo; `make test` sets up and runs every test.
# Setup: a .venv here (unless one is active), torch if it is not importable, then this package.
# Users with a GPU choose their torch build: make demo TORCH="torch --index-url https://download.pytorch.org/whl/cu124"

PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo test lab lint format badges bench slides chromium chapters grade classroom-template gpu-check clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e ".[course,dev]"
	@touch $(STAMP)

demo: setup
	$(VENV)/bin/minigpt demo all

# benchmarks/RESULTS.md and PNG plots: about 85 min on a 2-core Xeon with AMX (the sum of the sections' times
# in RESULTS.md; LoRA 29 min, the loss head and offloading 16), longer on a CPU that emulates bf16 (the memory
# grid alone took 24 min there). Run it on a quiet machine; after a change to a few benchmarks,
# `python -m benchmarks.run_all --only NAME ... --merge` re-measures those and keeps the other sections.
bench: setup
	$(PY) -m benchmarks.run_all

# Every chapter as a reveal.js deck in slides/ (not committed), with the scripts, styles and fonts it loads
# copied from vendor/slides/: the folder presents from a USB stick, offline. slides/index.html lists the decks
# and the lecture demos with their runtimes, timed here (DEMOS=quick: their tiny test sizes; DEMOS=none: untimed).
slides: setup
	$(PY) scripts/make_slides.py --demos $(or $(DEMOS),full)

# Headless Chromium and its driver for tests/test_slides_browser.py: apt-get, as root or with sudo (a few
# hundred MB). .ci/run calls it before make test. Where it cannot install them it says why and carries on:
# the browser test is then skipped, naming what is missing.
APT_CHROMIUM := apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver
chromium:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then echo "chromium and chromedriver: installed"; \
	elif ! command -v apt-get >/dev/null; then echo "no apt-get here: install chromium and chromedriver yourself"; \
	elif [ "$$(id -u)" = 0 ]; then sh -c '$(APT_CHROMIUM)' || echo "apt-get could not install chromium"; \
	elif sudo -n true 2>/dev/null; then sudo sh -c '$(APT_CHROMIUM)' || echo "apt-get could not install chromium"; \
	else echo "chromium is missing and apt-get needs root: sudo make chromium"; fi

# Every test, after the style gate (make lint), one torch thread per process (2-core CI: two threads fight the kernel and pytest for cores):
# 1. tests/: the package, the course machinery, and the grader (tests/test_grading.py grades solutions/,
#    the untouched stubs and the classic wrong answers with `pytest exercises/`, and runs the exercise
#    notebooks until their first check cell stops them);
# 2. nbval: every chapter and every solution notebook re-run and compared with its stored outputs.
test: setup lint
	OMP_NUM_THREADS=1 $(PY) -m pytest tests/ -q -p no:cacheprovider
	OMP_NUM_THREADS=1 $(PY) -m pytest --nbval chapters/ solutions/ -q -p no:cacheprovider

# Chapters are written as MyST markdown (chapters/NN_name.md); this runs each one in a fresh kernel and stores
# the outputs in its .ipynb, then runs every solution notebook the same way (6.5 min on a 2-core AMD EPYC).
# Edit the .md, never the .ipynb's cells: tests/test_chapters.py checks they agree, and names every notebook
# run before a change to a package file it imported (re-run those: scripts/make_chapters.py NN).
# Then it lays every chapter out as lecture slides from its fresh outputs: scripts/slide_metadata.py sets each
# cell's slideshow metadata from rules in the .md and the .ipynb (tests/test_slides.py checks it); and the
# exercise notebooks are generated again from the solution notebooks (scripts/make_exercises.py).
chapters: setup
	$(PY) scripts/make_chapters.py
	$(PY) scripts/slide_metadata.py
	$(PY) scripts/make_exercises.py

lab: setup
	$(VENV)/bin/jupyter lab chapters/

# The style gate make test runs first: lint rules and formatting (ruff is pinned in pyproject.toml, so the
# same version formats here and in CI). `make format` rewrites what the check would reject.
LINTED := minigpt tests scripts benchmarks exercises solutions
lint: setup
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)

format: setup
	$(VENV)/bin/ruff check --fix $(LINTED)
	$(VENV)/bin/ruff format $(LINTED)

# Grade a folder of submissions (one subfolder per learner, holding their exercises/chNN_*.py) into grades.csv,
# each learner in its own grader process, their answers in worker processes of its own: make grade
# SUBMISSIONS=dir/ [TIMEOUT=60]. grades.csv: one row per learner, whatever their code does (points per
# exercise, total, status graded / timed out / crashed, and a note).
grade: setup
	@test -n "$(SUBMISSIONS)" || (echo "usage: make grade SUBMISSIONS=dir/" && exit 2)
	$(PY) scripts/grade_submissions.py $(SUBMISSIONS) --out grades.csv $(if $(TIMEOUT),--exercise-timeout $(TIMEOUT))

# A copy of the course for learners without the reference answers (solutions/) or the course's own tests:
# it grades as this one does, and its stubs fail with their hints. make classroom-template OUT=dir
classroom-template:
	@test -n "$(OUT)" || (echo "usage: make classroom-template OUT=dir" && exit 2)
	$(PYTHON) scripts/classroom_template.py $(OUT)

# Every CUDA-only path on the GPU found here, predicted against measured, each check in its own process with
# its own time limit (under 10 min on one H100-class GPU): report.md and report.json in OUT (default
# gpu_check_out/). Without a GPU it says so in one line and exits 0. CHAPTERS=1 adds chapters 03, 04, 09 and
# 10 at SCALE = "full" (minutes more). Exit 1 when a check failed.
gpu-check: setup
	$(PY) scripts/gpu_check.py --out $(or $(OUT),gpu_check_out) $(if $(CHAPTERS),--chapters)

# Point every notebook's Colab badge and setup cell at another GitHub repo: make badges REPO=owner/name
badges: setup
	$(PY) scripts/badges.py $(if $(REPO),--repo $(REPO))

clean:
	rm -rf $(VENV) .pytest_cache demo_out slides gpu_check_out
