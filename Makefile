# Every target creates and uses .venv by itself: `make demo` and `make test`
# are the whole quick start on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: venv demo test test-fast bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# The main job: the reference kernel and the mock in a private sandbox, 32
# connections of verified turns, the report printed, everything torn down.
demo: $(STAMP)
	$(PY) -m harness stress --launch --conns 32 --inputs 10

test: $(STAMP)
	sh scripts/ensure-chromium.sh
	$(PY) -m pytest

test-fast: $(STAMP)
	$(PY) -m pytest -m fast -x -q

bench: $(STAMP)
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
