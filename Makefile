# The two commands a new user needs:
#   make demo   create .venv, install claw (runtime dependencies only), run its main job
#   make test   create .venv if needed, add the dev tools, then ruff, mypy --strict and
#               the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint typecheck pytest clean

# claw and its runtime dependencies: all the demo needs.
$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# The dev tools on top (pytest, hypothesis, mypy, ruff, the notebook kernel).
$(BIN)/.dev-installed: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/claw demo

lint: $(BIN)/.dev-installed
	$(BIN)/ruff check .

typecheck: $(BIN)/.dev-installed
	$(BIN)/mypy

pytest: $(BIN)/.dev-installed
	$(BIN)/python -m pytest -q

test: lint typecheck pytest

clean:
	rm -rf $(VENV) build *.egg-info
