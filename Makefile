# Two commands do all the set-up on a fresh machine:
#   make run   - creates .venv if missing, installs, opens the app
#   make test  - same set-up if needed, the import contracts (lint-imports), then the whole suite headless
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test bench venv clean screenshot

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/workbench $(ARGS)

test: $(STAMP)
	$(VENV)/bin/lint-imports
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(PY) -m benchmarks

screenshot: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(VENV)/bin/workbench --screenshot resources/screenshot.png

clean:
	rm -rf $(VENV) build *.egg-info
