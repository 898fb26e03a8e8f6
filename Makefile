# The two commands of the README: `make run` and `make test`.
# PYTHON: prefer the system's Python: its files are readable by every account, which
# `classhub local --system-users` needs (a Python under /root is not).
PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || command -v python3)
VENV := .venv
CHP_VERSION := 4.6.3
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: run test test-unit lint install clean

$(VENV)/bin/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "classhub needs Python 3.10+; set PYTHON=/path/to/python3.10+")'
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -U pip

$(STAMP): $(VENV)/bin/python setup.cfg pyproject.toml
	$(VENV)/bin/pip install -q -e '.[test]'
	@command -v npm >/dev/null || { echo "make: npm not found; install Node.js 18+ and npm (apt-get install nodejs npm)"; exit 1; }
	npm install --silent --no-audit --no-fund --prefix $(VENV)/chp configurable-http-proxy@$(CHP_VERSION)
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/classhub local $(ARGS)

test: $(STAMP)
	$(VENV)/bin/python -m pytest $(ARGS)

# The quick tier: pure logic and the store, no hub, no cluster (under a minute).
test-unit: $(STAMP)
	$(VENV)/bin/python -m pytest -m unit -q $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) var
