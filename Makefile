# The two commands of the README: `make run` and `make test`.
# PYTHON: prefer the system's Python: its files are readable by every account, which
# `classhub local --system-users` needs (a Python under /root is not).
PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || command -v python3)
VENV := .venv
CHP_VERSION := 4.6.3
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: run test test-busy test-unit test-hub test-cluster test-browser lint install clean labextension types \
	flake-check docs dist

$(VENV)/bin/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "classhub needs Python 3.10+; set PYTHON=/path/to/python3.10+")'
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -U pip

# The JupyterLab panel (labextension/): built with jlpm when its sources change; the venv gets a
# link to the build (what `jupyter labextension develop` makes), a wheel ships a copy (setup.cfg).
LABEXT_OUT := labextension/prebuilt/package.json
LABEXT_SRC := $(wildcard labextension/src/*.ts labextension/style/*) labextension/package.json \
	labextension/tsconfig.json labextension/yarn.lock labextension/scripts/build-labextension.js
LABEXT_LINK := $(VENV)/share/jupyter/labextensions/classhub-jupyterlab
# classhub's JupyterLab settings (setup.py, OVERRIDES), linked like the panel in the editable install
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.d/classhub.json

$(LABEXT_OUT): $(LABEXT_SRC) | $(VENV)/bin/python
	$(VENV)/bin/pip install -q 'jupyterlab>=4.0'
	cd labextension && PATH="$(abspath $(VENV))/bin:$$PATH" PYTHON="$(abspath $(VENV))/bin/python" \
		sh -c 'jlpm install && jlpm build:prod'

labextension: $(LABEXT_OUT)

# The panel's TypeScript types of the service's API (labextension/src/api-types.ts), generated
# from the OpenAPI document, whose request bodies are the handlers' pydantic models. Run it after
# changing a model or the document, and commit the file: tests/test_service_openapi.py fails
# while it is stale.
types: $(STAMP)
	cd labextension && PATH="$(abspath $(VENV))/bin:$$PATH" PYTHON="$(abspath $(VENV))/bin/python" \
		sh -c 'jlpm install && jlpm gen:types'

$(STAMP): $(VENV)/bin/python setup.cfg setup.py build_backend.py pyproject.toml $(LABEXT_OUT)
	$(VENV)/bin/pip install -q -e '.[test,docs]'
	@# jsonschema's optional "iri" format check (rfc3987-syntax, via jupyter-events' format-nongpl
	@# extra) builds a grammar at import: 1.6 s of CPU in every hub, service and server process.
	@# No schema of JupyterHub, jupyter_server, JupyterLab or classhub uses the "iri" format.
	$(VENV)/bin/pip uninstall -q -y rfc3987-syntax
	mkdir -p $(dir $(LABEXT_LINK)) && ln -sfn $(abspath labextension/prebuilt) $(LABEXT_LINK)
	mkdir -p $(dir $(LAB_OVERRIDES)) && ln -sfn $(abspath labextension/overrides.d/classhub.json) $(LAB_OVERRIDES)
	@command -v npm >/dev/null || { echo "make: npm not found; install Node.js 18+ and npm (apt-get install nodejs npm)"; exit 1; }
	npm install --silent --no-audit --no-fund --prefix $(VENV)/chp configurable-http-proxy@$(CHP_VERSION)
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/classhub local $(ARGS)

# The suite runs its modules on TEST_WORKERS pytest-xdist workers (each module on one worker,
# the slowest first: tests/conftest.py): most of its time is spent waiting for hub, server and
# cluster processes, so four workers share two cores well (with one core kept busy, 4 workers ran
# the suite 3-8 % faster than 3: docs/contributing/reliability.md). TEST_WORKERS=0 runs it in one
# process.
TEST_WORKERS ?= 4
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)
test: $(STAMP)
	$(VENV)/bin/python -m pytest $(XDIST) $(ARGS)

# The suite as `make test` runs it, beside a process that keeps one core busy (issue 29: the
# suite must pass on a loaded machine, not only an idle one). Only that process is stopped after.
test-busy: $(STAMP)
	@$(VENV)/bin/python -c 'while True: pass' & busy=$$!; trap 'kill $$busy' EXIT INT TERM; \
	echo "make test-busy: one core kept busy by process $$busy"; \
	$(VENV)/bin/python -m pytest $(XDIST) $(ARGS)

# The quick tier: pure logic and the store, no hub, no cluster (under a minute).
test-unit: $(STAMP)
	$(VENV)/bin/python -m pytest -m unit -q $(ARGS)

# One tier of the suite (each test is marked with its tier; see TIERS in tests/conftest.py).
test-hub test-cluster test-browser: test-%: $(STAMP)
	$(VENV)/bin/python -m pytest -m $* $(XDIST) $(ARGS)

# The documentation site (docs/, Sphinx + MyST) into docs/_build/html, warnings as errors: a broken
# link between pages, a missing page or a bad directive fails it. The reference pages are
# generated from the code (docs/_ext/classhub_docs.py). .ci/check_refs.py checks that the pages
# and headings code comments cite exist.
docs: $(STAMP)
	$(VENV)/bin/python -m sphinx -W --keep-going -n -b html -q docs docs/_build/html
	$(VENV)/bin/python .ci/check_refs.py

# A release: the sdist and the wheel in dist/, both carrying the JupyterLab panel prebuilt
# (setup.py builds it when labextension/prebuilt is missing; Node.js is needed only then).
dist: $(STAMP)
	$(VENV)/bin/python -m build --outdir dist .

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# Flaky tests: each module N times in a fresh pytest (default: every hub, cluster and browser
# module); MODULES="tests/test_x.py ..." picks modules (or tests: "tests/test_x.py::test_y"),
# LOAD=1 keeps one core busy, SUITE=1 runs the whole suite N times (as `make test` runs it),
# J=3 runs three at a time. Prints "<module>: n of N passed (mean, max seconds)".
N ?= 20
flake-check: $(STAMP)
	TEST_WORKERS=$(TEST_WORKERS) $(VENV)/bin/python -m tests.flakecheck -n $(N) $(if $(LOAD),--load) $(if $(SUITE),--suite) $(if $(J),-j $(J)) $(MODULES)

clean:
	rm -rf $(VENV) var
