# Readers: `make html`.  Maintainers: `make test`, `make doctest`, `make record`, `make matrix`,
# `make bench`.
# Every target creates the virtualenv from the pinned requirements first, if it is missing or stale.

PYTHON     ?= python3
VENV       := .venv
BIN        := $(VENV)/bin
BUILD      := _build
SPHINXOPTS ?= -W --keep-going -j auto
PAGES      ?=
SPHINX     := $(BIN)/sphinx-build -c . $(SPHINXOPTS)
# `make doctest PAGES=part1/04-autodiff,part2/12-training-run` executes only those pages.
ONLY       := $(if $(PAGES),-D verified_pages=$(PAGES))
# `make html` shows a page from the verified record when the record is of exactly what would
# run (else it executes it); `make html FRESH=1` executes every page.
FRESHLY    := $(if $(filter 1,$(FRESH)),-D verified_fresh=1)

# The other verified JAX versions, named once: `verified_matrix` in conf.py (a one-line list).
# Each has its pinned requirements-jax-VERSION.txt and its virtualenv .venv-jax-VERSION.
MATRIX_VERSIONS := $(shell sed -n 's/^verified_matrix *= *\[\(.*\)\].*/\1/p' conf.py | tr -d "\"',")
MATRIX_VENVS    := $(foreach v,$(MATRIX_VERSIONS),.venv-jax-$(v)/.installed)

# The verified platforms (`verified_platforms` in conf.py) run on a machine that has that
# accelerator, with the Python whose JAX drives it: `make platform SYSTEM=1` uses `python3` as
# it is (a TPU VM's JAX with libtpu) instead of .venv, whose CPU jaxlib sees no accelerator.
# `make platform PLATFORM=name` runs that verified platform only (the one this machine has).
RUN_PLATFORM := $(if $(PLATFORM),-D verified_platform_run=$(PLATFORM))
SYSTEM_PYTHON ?= python3
ifeq ($(SYSTEM),1)
PLATFORM_SETUP := system-python
PLATFORM_SPHINX := $(SYSTEM_PYTHON) -m sphinx -c . $(SPHINXOPTS)
else
PLATFORM_SETUP := venv
PLATFORM_SPHINX := $(SPHINX)
endif

.PHONY: html doctest record portability matrix matrix-doctest platform platform-doctest test bench bench-exclusivity serve clean venv system-python

venv: $(VENV)/.installed

# `SYSTEM=1`: the machine's own Python must hold what a platform build imports, with the pinned
# jax and jaxlib; else say what is missing or differs, before Sphinx is asked for.
system-python:
	@$(SYSTEM_PYTHON) ext/verified/system_python.py requirements.txt

$(VENV)/.installed: requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

.venv-jax-%/.installed: requirements-jax-%.txt
	test -x .venv-jax-$*/bin/python || $(PYTHON) -m venv .venv-jax-$*
	.venv-jax-$*/bin/python -m pip install --quiet --disable-pip-version-check -r $<
	touch $@

html: venv
	$(SPHINX) -b html source $(BUILD)/html -d $(BUILD)/doctrees $(FRESHLY) $(ONLY)

# Re-executes every document (no cache) and compares each block with the verified record.
doctest: venv
	$(SPHINX) -E -b doctest source $(BUILD)/doctest -d $(BUILD)/doctrees-doctest $(ONLY)

# Re-executes every document and rewrites the verified record under record/.
record: venv
	$(SPHINX) -E -b record source $(BUILD)/record -d $(BUILD)/doctrees-record $(ONLY)

# Runs every page under each other verified version and writes record/matrix/jax-VERSION/.
matrix: venv $(MATRIX_VENVS)
	$(SPHINX) -E -b matrix source $(BUILD)/matrix -d $(BUILD)/doctrees-matrix $(ONLY)

# Re-runs every page under each other verified version and compares with its matrix record.
matrix-doctest: venv $(MATRIX_VENVS)
	$(SPHINX) -E -b matrix-doctest source $(BUILD)/matrix-doctest -d $(BUILD)/doctrees-matrix-doctest $(ONLY)

# Runs every page on each verified platform (one at a time) and writes record/platform/NAME/;
# stops at once where JAX sees no such platform. Not part of `make test` (CI has no TPU).
platform: $(PLATFORM_SETUP)
	$(PLATFORM_SPHINX) -E -b platform source $(BUILD)/platform -d $(BUILD)/doctrees-platform $(ONLY) $(RUN_PLATFORM)

# Re-runs every page on each verified platform and compares with its platform record.
platform-doctest: $(PLATFORM_SETUP)
	$(PLATFORM_SPHINX) -E -b platform-doctest source $(BUILD)/platform-doctest -d $(BUILD)/doctrees-platform-doctest $(ONLY) $(RUN_PLATFORM)

# `make doctest` three ways: natively, as an older CPU (XLA limited to AVX) and on one core.
portability: venv
	PYTHONPATH=ext $(BIN)/python -m verified.portability $(SPHINX) $(ONLY)

# Fast tests first; the portability runs then verify the record, from which the site build of
# the JAX tests (browser) shows every page, so the course is not executed once more for them.
test: venv
	$(BIN)/python -m pytest tests -m "not jax"
	$(MAKE) portability
	$(BIN)/python -m pytest tests -m jax
	$(MAKE) matrix-doctest

bench: venv
	$(BIN)/python bench/run.py

# Timing stability with page-level against block-level exclusivity (5 runs of each).
bench-exclusivity: venv
	$(BIN)/python bench/exclusivity.py

serve: html
	$(BIN)/python -m http.server --directory $(BUILD)/html 8000

clean:
	rm -rf $(BUILD)
