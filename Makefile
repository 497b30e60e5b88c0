# Three Axes: make lab | make test | make release | make grade
# Everything runs inside .venv, created on first use from the pinned environment.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# two installs: what a student's make lab needs (requirements.txt), then what tests, grading and
# the linter need on top of it (requirements-dev.txt); constraints.txt pins both
LAB_STAMP := $(VENV)/.lab-stamp
STAMP  := $(VENV)/.installed-stamp
# pytest workers: 2 matches the 2-core machines the course is tested on
JOBS   ?= 2

.PHONY: lab lab-instructor reset lint typecheck test test-fast release grade grade-demo report student-repo bench clean-grading help

help:
	@echo "make lab        your copy of the course in work/ (new drops added, nothing overwritten),"
	@echo "                then JupyterLab on its start page (installs .venv first)"
	@echo "make reset DROP=<drop>  back up your copy of one drop in work/ and take the release's again"
	@echo "make lab-instructor     JupyterLab on the repository itself, with nbgrader's formgrader"
	@echo "make test       ruff, then the whole suite (package, notebooks (nbval), grading path) and mypy beside it"
	@echo "make lint       ruff check (pyproject.toml's rules), as make test runs it first"
	@echo "make typecheck  mypy on threeaxes/ and autograder/ (pyproject.toml's [tool.mypy]), as make test runs it beside the suite"
	@echo "make test-browser  a student's session in headless Chromium (apt-get install chromium chromium-driver)"
	@echo "make release    regenerate release/ from source/ with nbgrader"
	@echo "make grade      autograde submitted/ (JOBS at once, each sandboxed), write feedback/ and grades.csv"
	@echo "make grade-demo copy the sample submissions into submitted/, then grade"
	@echo "make report     after grading: the class's mistakes per exercise (report/index.html)"
	@echo "make student-repo DEST=<folder>  the course without source/ (solutions, hidden tests), for students"
	@echo "make bench      print the benchmark figures"
	@echo "make hub        a JupyterHub for a class on this machine (HUB_ARGS=\"--students a,b --port 8000\"; README)"

# INSTALL: pip install, unpacked by uv on every core where pip's own settings can be handed to it,
# else by pip (autograder/apps/install.py; THREEAXES_INSTALLER=pip: always pip). The venv is made
# without pip, which install.py adds uncompiled (ensurepip spent 7 s installing and compiling one).
# COMPILE: nothing is compiled as it is installed; this compiles on every core, 500 files a process
# (pip compiles one file after another: the lab install took 66 s on 2 cores, 41 s this way).
# Every process reads the compiled files, so none compiles torch again where
# PYTHONDONTWRITEBYTECODE is set. compileall exits 1 for a file that is not Python 3.11 on purpose
# (one of torch's tests is 3.12 syntax), which pip skips as well: not an error here. An up-to-date
# file is only looked at. The packages' own tests/ folders (sympy's, numpy's...: 1,563 files; not
# the course's tests/, named as a root) are left out, since nothing imports them (site-packages on
# 2 cores: 27.6 s with them, 20.6 s without).
INSTALL = $(BIN)/python -m autograder.apps.install -q --no-compile
COMPILE = find $(1) -name '*.py' -not -path '*/tests/*' -print0 | xargs -0 -P $$(getconf _NPROCESSORS_ONLN) -n 500 $(BIN)/python -m compileall -q > /dev/null || true
SITE    = $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')

$(LAB_STAMP): requirements.txt constraints.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv --without-pip $(VENV)
	$(INSTALL) -r requirements.txt -c constraints.txt
	$(INSTALL) --no-deps -e .
	$(call COMPILE,$(SITE) threeaxes autograder)
	touch $(LAB_STAMP)

$(STAMP): $(LAB_STAMP) requirements-dev.txt
	$(INSTALL) -r requirements-dev.txt -c constraints.txt
	$(call COMPILE,$(SITE))
	touch $(STAMP)

# Students work in work/ (git-ignored); see autograder/apps/workspace.py.
lab: $(LAB_STAMP)
	$(BIN)/python -m autograder.apps.workspace lab

lab-instructor: $(STAMP)
	$(BIN)/python -m autograder.apps.workspace lab --instructor

reset: $(LAB_STAMP)
	$(BIN)/python -m autograder.apps.workspace reset $(DROP)

lint: $(STAMP)
	$(BIN)/ruff check .

# the files and rules are pyproject.toml's [tool.mypy]; its cache (.mypy_cache) makes a second run fast
typecheck: $(STAMP)
	$(BIN)/mypy

# a kernel can take over a minute to answer while the grading test loads both cores; --dist loadgroup:
# each test file on one worker, the files that read the one graded class together (tests/conftest.py);
# --no-loadscope-reorder: the files in conftest's order, longest first (pytest-xdist would otherwise
# put the files with the most tests first and a one-test browser session of minutes on the tail);
# PYTHONPATH: the source notebooks' hidden tests import autograder.references;
# mypy (make typecheck) runs beside the suite and says its verdict after it: alone, on a fresh clone
# (no .mypy_cache), it keeps one core busy for 25 s while the other waits; either failing fails make test;
# PYTEST_PLUGINS: the pytest plugins the suite uses, named, none autoloaded: pytest rewrites the asserts
# of every module of each autoloaded plugin's distribution as it is imported (hypothesis's 72 and
# anyio's 30 among 120), in each worker, where PYTHONDONTWRITEBYTECODE keeps none of it
PYTEST_PLUGINS := -p xdist.plugin -p nbval.plugin -p _hypothesis_pytestplugin
test: lint $(STAMP)
	@$(call COMPILE,threeaxes autograder tests)
	@$(BIN)/mypy > $(VENV)/typecheck.log 2>&1 & typecheck=$$!; \
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONPATH=$(CURDIR) $(BIN)/python -m pytest $(PYTEST_PLUGINS) \
	    -n $(JOBS) --dist loadgroup --no-loadscope-reorder -p no:cacheprovider \
	    tests --nbval-lax --nbval-kernel-startup-timeout=180 notebooks source --durations=15; suite=$$?; \
	wait $$typecheck; typed=$$?; echo "mypy:"; cat $(VENV)/typecheck.log; \
	test $$suite -eq 0 && test $$typed -eq 0

test-fast: lint typecheck
	$(BIN)/python -m pytest -n $(JOBS) -m "not slow" tests

# the browser test alone (tests/browser); here a missing Chromium, driver or selenium fails it, by name
.PHONY: test-browser
test-browser: $(STAMP)
	THREEAXES_BROWSER_TEST=required $(BIN)/python -m pytest -p no:cacheprovider -s tests/browser

release: $(STAMP)
	$(BIN)/python -m autograder.apps.release

grade: $(STAMP)
	$(BIN)/python -m autograder.apps.grade --jobs $(JOBS)

grade-demo: $(STAMP)
	$(BIN)/python -m autograder.apps.grade --demo --jobs $(JOBS)

# after make grade: the class's mistakes per drop and exercise (report/index.html, CSV, PNG)
report: $(STAMP)
	$(BIN)/python -m autograder.apps.report

# for instructors who grade for credit: publish this, not the repository
DEST ?= ../three-axes-student
student-repo:
	$(PYTHON) -m autograder.apps.student_repo $(DEST)

bench: $(STAMP)
	$(BIN)/python benchmarks/launch.py
	$(BIN)/python benchmarks/planner.py
	$(BIN)/python benchmarks/published_runs.py
	$(BIN)/python benchmarks/train_3d.py
	$(BIN)/python benchmarks/data_parallel_overlap.py
	$(BIN)/python benchmarks/sharding.py
	$(BIN)/python benchmarks/tensor_parallel_comm.py
	$(BIN)/python benchmarks/pipeline_bubble.py

# A JupyterHub for one class on this machine (autograder/apps/hub/, hub/): real Unix accounts as
# root, the demo login otherwise. jupyterhub and configurable-http-proxy, pinned in hub/, are
# installed here on first use into a cache (never into .venv, never by make lab or make test).
.PHONY: hub
hub: $(STAMP)
	$(BIN)/python -m autograder.apps.hub start $(HUB_ARGS)
