# Two commands do all the set-up on a fresh machine:
#   make run   - creates .venv if missing, installs, opens the app
#   make test  - same set-up if needed, the import contracts (lint-imports), then the whole suite headless
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test bench venv clean screenshot

# A package that contributes an architecture through an entry point (docs/plugins.md):
# the tests check that Workbench lists and builds what an installed package registers.
PLUGIN := tests/example_plugin
PLUGIN_STAMP := $(VENV)/.example-plugin-installed

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e '.[test]'
	touch $(STAMP)

# its own stamp: a change to the example reinstalls it alone, and a reinstall of Workbench reinstalls it too
$(PLUGIN_STAMP): $(STAMP) $(PLUGIN)/pyproject.toml $(wildcard $(PLUGIN)/workbench_example_plugin/*.py)
	$(PY) -m pip install -e $(PLUGIN)
	touch $(PLUGIN_STAMP)

venv: $(STAMP) $(PLUGIN_STAMP)

run: venv
	$(VENV)/bin/workbench $(ARGS)

# Two pytest-xdist workers: much of the suite waits on processes it starts (training processes, torchrun ranks),
# so two workers take ~13 min where one took ~25 on 2 cores. The tests of the one ssh host and SLURM cluster
# (tests/remote) share one test user and run after, in one process (also when the first part fails).
# PYTEST_WORKERS= runs the first part on one process; PYTEST_ARGS="tests/ui -k layout" runs only what it names.
PYTEST_WORKERS ?= -n 2

test: venv
	$(VENV)/bin/lint-imports
ifeq ($(strip $(PYTEST_ARGS)),)
	rc=0; QT_QPA_PLATFORM=offscreen $(PY) -m pytest $(PYTEST_WORKERS) --ignore=tests/remote || rc=$$?; \
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest tests/remote || rc=$$?; exit $$rc
else
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest $(PYTEST_ARGS)
endif

bench: venv
	QT_QPA_PLATFORM=offscreen $(PY) -m benchmarks

screenshot: venv
	QT_QPA_PLATFORM=offscreen $(VENV)/bin/workbench --screenshot resources/screenshot.png

clean:
	rm -rf $(VENV) build *.egg-info
