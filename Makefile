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

.PHONY: install book student course test lint unit notebooks portability versions browser chromium bwrap nbgrader clean \
	pdf pdf-test pdf-student pdf-deps

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q -e .
	touch $@

install: $(STAMP)

# Always a clean build: an incremental one would not re-report warnings of unchanged pages. The print
# edition (_build/pdf, `make pdf`) stays: a book built after it links it and serves it.
book: $(STAMP)
	find _build -mindepth 1 -maxdepth 1 ! -name pdf -exec rm -rf {} + 2>/dev/null || true
	$(BIN)/jupyter-book build . --warningiserror --nitpick --keep-going
	@echo "The book is at file://$(CURDIR)/_build/html/index.html"

# A course's student edition (README, "For teachers"): _build/student/notebooks/ (solutions stubbed, outputs
# cleared) and the HTML book with every solution removed, in _build/student/book/_build/html. STUDENT_REPOSITORY
# (a GitHub URL; STUDENT_BRANCH, STUDENT_PATH) is where you publish _build/student/book/: its Colab buttons then
# open the student notebooks there; without it the edition has no Colab or repository buttons.
STUDENT_REPOSITORY ?=
STUDENT_BRANCH ?= main
STUDENT_PATH ?=
student: $(STAMP)
	rm -rf _build/student
	$(BIN)/python -m attention_book.course student chapters _build/student/notebooks
	$(BIN)/python -m attention_book.course edition . _build/student/book --branch "$(STUDENT_BRANCH)" \
	  --path-to-book "$(STUDENT_PATH)" $(if $(STUDENT_REPOSITORY),--repository "$(STUDENT_REPOSITORY)")
	$(BIN)/jupyter-book build _build/student/book --warningiserror --nitpick --keep-going
	@echo "The student edition is at file://$(CURDIR)/_build/student/book/_build/html/index.html"

# nbgrader's course folder: one assignment per chapter with its graded exercises (README, "For teachers").
course: $(STAMP)
	rm -rf _build/course
	$(BIN)/python -m attention_book.course course chapters _build/course

# nbgrader's commands in the course folder, with the virtual environment's tools on PATH (nbgrader runs
# `alembic` as a program): make nbgrader ARGS="generate_assignment 05_causal_attention" (README, "For teachers").
COURSE ?= _build/course
nbgrader: $(STAMP)
	cd $(COURSE) && PATH="$(CURDIR)/$(BIN):$$PATH" "$(CURDIR)/$(BIN)/nbgrader" $(ARGS)

# ruff over the package, tests, benchmarks and the notebooks' code cells (rules in pyproject.toml).
lint: $(STAMP)
	$(BIN)/ruff check .

# bwrap: the grader's sandbox (tests/test_grading.py grades in it). tests/test_pdf.py checks the PDF that
# `make pdf` builds: `make pdf-test` runs it.
unit: $(STAMP) bwrap
	$(BIN)/python -m pytest tests --ignore=tests/browser --ignore=tests/test_pdf.py

# CHAPTERS: the notebooks nbval re-runs (all by default; e.g. `make portability CHAPTERS=chapters/07_kv_cache.ipynb`).
CHAPTERS ?= chapters
NBVAL := $(BIN)/python -m pytest --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
	-p no:cacheprovider $(CHAPTERS)

notebooks: $(STAMP)
	$(NBVAL)

# make portability: every notebook under nbval once more for each numeric path below, each a stand-in
# for another reader's machine (another processor, thread count or BLAS kernel). Every stored output
# must survive every variant. What each switch does to torch 2.13's CPU wheel (MKL 2024.2, oneDNN 3.12)
# and numpy's OpenBLAS was measured with tests/portability/switches.py:
#   ATEN_CPU_CAPABILITY  default|avx2|avx512: ATen's own vectorised kernels (softmax, exp, sums, SDPA);
#                        `default` also moves MKL's GEMM onto another path. Honoured.
#   threads              torch's intra-op threads; MKL splits small GEMMs differently with 1 thread.
#                        torch caps OMP_NUM_THREADS at the core count, so tests/portability/
#                        sitecustomize.py sets 3 with torch.set_num_threads. Honoured.
#   MKL_CBWR=COMPATIBLE  MKL's conditional numerical reproducibility, the SSE2-level GEMM path that
#                        every x86 processor takes alike. Honoured (MKL_VERBOSE reports CNR:COMPATIBLE).
#   OPENBLAS_CORETYPE    numpy's OpenBLAS kernel (chapters 6-7 compute with numpy); Sandybridge is AVX
#                        without FMA, unlike both Haswell (AVX2) and SkylakeX (AVX-512). Honoured.
# Switches that do nothing here, measured on an AMD EPYC (Zen 4): MKL_ENABLE_INSTRUCTIONS=AVX2|SSE4_2 (no
# result changes), MKL_DEBUG_CPU_TYPE (ignored since MKL 2020.1), ONEDNN_MAX_CPU_ISA and DNNL_MAX_CPU_ISA
# (oneDNN is not on the fp32 CPU path of anything the book computes). MKL_CBWR=AVX2 on an AMD processor
# falls back to CNR:AUTO (MKL_VERBOSE says so), which moves only the smallest GEMMs; COMPATIBLE covers it.
PORTABILITY_VARIANTS := aten-default aten-avx2 threads-1 threads-3 mkl-compatible openblas-sandybridge
portability-aten-default: export ATEN_CPU_CAPABILITY := default
portability-aten-avx2: export ATEN_CPU_CAPABILITY := avx2
portability-threads-1: export BOOK_TORCH_THREADS := 1
portability-threads-1: export OMP_NUM_THREADS := 1
portability-threads-3: export BOOK_TORCH_THREADS := 3
portability-threads-3: export OPENBLAS_NUM_THREADS := 3
portability-mkl-compatible: export MKL_CBWR := COMPATIBLE
portability-openblas-sandybridge: export OPENBLAS_CORETYPE := Sandybridge

.PHONY: $(addprefix portability-,$(PORTABILITY_VARIANTS))
$(addprefix portability-,$(PORTABILITY_VARIANTS)): $(STAMP)
	@echo "== nbval, variant $(@:portability-%=%)"
	PYTHONPATH=$(CURDIR)/tests/portability $(NBVAL) -q

# -k: every variant runs and reports, even after one fails.
portability: $(STAMP)
	$(MAKE) --no-print-directory -k $(addprefix portability-,$(PORTABILITY_VARIANTS))

# make versions: the chapters under nbval in each version set of version-sets/*.txt: Colab's default runtime
# and its runtime 2026.07, from Colab's own record (googlecolab/backend-info's pip-freeze.txt; each file
# cites its commit), and the oldest versions pyproject.toml declares (lower). Each set gets its own venv in
# .venv-versions/, built from the registry by scripts/versions_venv.sh with the package installed without
# requirements.txt's pins (the first time about 9 minutes and 8 GB per set, mostly torch's CUDA wheels;
# rebuilt when the set or pyproject.toml changes). The printing rule's tests run there too. The version
# cells are the only outputs allowed to differ, and only in the versions they print: tests/nbval_versions.cfg.
# One set: `make versions VERSION_SETS=colab-default`; with -k every set runs and reports.
VERSION_SETS ?= colab-default colab-2026.07 lower
VERSIONS_SANITIZE := _build/nbval_versions.cfg
.PHONY: $(addprefix versions-,$(VERSION_SETS))
versions: $(addprefix versions-,$(VERSION_SETS))
$(addprefix versions-,$(VERSION_SETS)): versions-%:
	@echo "== nbval, version set $*"
	scripts/versions_venv.sh version-sets/$*.txt
	mkdir -p _build && cat tests/nbval_sanitize.cfg tests/nbval_versions.cfg > $(VERSIONS_SANITIZE)
	.venv-versions/$*/bin/python -m pytest -q -p no:cacheprovider tests/test_printing.py
	.venv-versions/$*/bin/python -m pytest --nbval --nbval-current-env --nbval-sanitize-with $(VERSIONS_SANITIZE) \
		-p no:cacheprovider $(CHAPTERS)

# axe-core, the accessibility checker the browser test runs in every page, from npm at the version
# package.json pins (no lock file: .npmrc). Defined before `browser`, whose prerequisites expand it.
AXE := node_modules/axe-core/axe.min.js
$(AXE): package.json
	npm install --silent
	touch $@

# Every chapter page of the built book in headless Chromium (from the OS's packages) with axe-core;
# screenshots go to _build/screenshots. Runs on the book that `make book` built.
browser: $(STAMP) chromium $(AXE)
	test -f _build/html/index.html || $(MAKE) book
	$(BIN)/python -m pytest tests/browser


chromium:
	@command -v chromium >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-noto-cjk; }

# bubblewrap, the sandbox the course grader builds each submission's view of the machine with (README,
# "For teachers"), from the OS's packages like chromium.
bwrap:
	@command -v bwrap >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends bubblewrap; }

# make pdf: the print edition, _build/pdf/attention-from-scratch.pdf (README, "A print edition"): Sphinx's
# LaTeX builder and XeLaTeX with pdf/_config.yml merged into _config.yml (pdf/build.py). The TeX packages
# come from the OS (pdf-deps: 36 packages, 464 MiB installed on Debian 12). `make book` afterwards links the PDF.
PDF_PACKAGES := texlive-xetex texlive-latex-extra texlive-fonts-recommended texlive-lang-cjk latexmk \
	fonts-noto-cjk fonts-freefont-otf fonts-dejavu-core librsvg2-bin poppler-utils
pdf-deps:
	@dpkg -s $(PDF_PACKAGES) >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends $(PDF_PACKAGES); }

pdf: $(STAMP) pdf-deps
	$(BIN)/python pdf/build.py .
	$(MAKE) --no-print-directory pdf-test

# The PDF's checks (tests/test_pdf.py): pages, the LaTeX log's warnings, chapters, figures, margins.
PDF_BOOK ?= .
pdf-test: $(STAMP)
	PDF_BOOK=$(PDF_BOOK) $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_pdf.py

# The student edition's PDF (no solutions): _build/student/book/_build/pdf/attention-from-scratch.pdf.
pdf-student: student pdf-deps
	$(BIN)/python pdf/build.py _build/student/book
	$(MAKE) --no-print-directory pdf-test PDF_BOOK=_build/student/book

test: lint unit notebooks book browser

clean:
	rm -rf _build $(VENV)
