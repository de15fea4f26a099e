# `make run` and `make test` work on a fresh machine: each creates .venv and installs requirements.txt.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: run test setup

$(VENV)/installed.stamp: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

setup: $(VENV)/installed.stamp

run: setup
	$(PY) launch.py $(ARGS)

test: setup
	$(PY) -m pytest -q tests
