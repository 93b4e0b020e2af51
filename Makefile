# Two commands do all the set-up on a fresh machine with only python3:
#   make book   build the HTML book (creates .venv and installs everything first)
#   make test   unit tests, every notebook re-run under nbval, and a warnings-as-errors build
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# TensorFlow's C++ logging and oneDNN notices must never reach stored notebook outputs.
export TF_CPP_MIN_LOG_LEVEL := 3
export TF_ENABLE_ONEDNN_OPTS := 0
export PYTHONHASHSEED := 0

.PHONY: install book student test unit notebooks browser chromium clean

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q -e .
	touch $@

install: $(STAMP)

# Always a clean build: an incremental one would not re-report warnings of unchanged pages.
book: $(STAMP)
	rm -rf _build
	$(BIN)/jupyter-book build . --warningiserror --nitpick --keep-going
	$(MAKE) --no-print-directory student
	@echo "The book is at file://$(CURDIR)/_build/html/index.html"

# Student notebooks for a course: solutions stubbed, outputs cleared (see the README, "For teachers").
student: $(STAMP)
	$(BIN)/python -m attention_book.assignments student chapters _build/student

unit: $(STAMP)
	$(BIN)/python -m pytest tests --ignore=tests/browser

notebooks: $(STAMP)
	$(BIN)/python -m pytest --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg chapters

# Every chapter page of the built book in headless Chromium (from the OS's packages); screenshots go to
# _build/screenshots. Runs on the book that `make book` built.
browser: $(STAMP) chromium
	test -f _build/html/index.html || $(MAKE) book
	$(BIN)/python -m pytest tests/browser

chromium:
	@command -v chromium >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-noto-cjk; }

test: unit notebooks book browser

clean:
	rm -rf _build $(VENV)
