# The two commands a new user needs:
#   make demo   create .venv, install claw (runtime dependencies only), run its main job
#   make test   create .venv if needed, add the dev tools, then ruff, mypy --strict and
#               the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint typecheck pytest clean extras notebooks

# The editable install puts the checkout itself on the venv's path (a .pth line) rather
# than setuptools' default import hook, which mypy and other static tools cannot follow:
# with it, `mypy` run on your own code outside this folder finds `claw` and its types.
# ("strict" mode would too, but it links the files present at install time, so a module
# added later stays invisible until a reinstall.)
EDITABLE := --config-settings editable_mode=compat

# claw and its runtime dependencies: all the demo needs.
$(BIN)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(EDITABLE) -e .
	touch $@

# The dev tools on top (pytest, hypothesis, mypy, ruff, the notebook kernel).
$(BIN)/.dev-installed: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet $(EDITABLE) -e '.[dev]'
	touch $@

# Optional extras into this checkout's .venv (trio-claw is not on a registry):
#   make extras EXTRAS=mcp,postgres
extras: $(BIN)/.installed
	@test -n "$(EXTRAS)" || { echo "usage: make extras EXTRAS=mcp[,postgres,st]"; exit 2; }
	$(BIN)/python -m pip install --quiet $(EDITABLE) -e '.[$(EXTRAS)]'

demo: $(BIN)/.installed
	$(BIN)/claw demo

lint: $(BIN)/.dev-installed
	$(BIN)/ruff check .

typecheck: $(BIN)/.dev-installed
	$(BIN)/mypy

pytest: $(BIN)/.dev-installed
	$(BIN)/python -m pytest -q

test: lint typecheck pytest

# Run the notebooks and write their outputs back (tests/test_notebooks.py checks them).
notebooks: $(BIN)/.dev-installed
	CLAW_UPDATE_NOTEBOOKS=1 $(BIN)/python -m pytest -q tests/test_notebooks.py

clean:
	rm -rf $(VENV) build *.egg-info
