# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean install

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# torch first: a plain torch requirement would pull a multi-GB CUDA build. deploy/constraints.txt
# pins what the image installs (the k8s/agent/fed/dqn/sim/carbon closure) at the tested versions,
# so the venv tests what ships: unpinned, a new upstream release (pandas 3.1.2 under codecarbon)
# made the venv differ from the image and failed a clean clone's tests.
$(STAMP): $(PY) pyproject.toml deploy/constraints.txt
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[all,dev]' -c deploy/constraints.txt
	touch $(STAMP)

install: $(STAMP)

# The main story on built-in defaults: every solver on the example problems (the dqn one with its
# shipped policy), then the bank A/B in the simulator (kube-default vs ours, carbon and cost).
demo: $(STAMP)
	$(VENV)/bin/iro solvers
	$(VENV)/bin/iro compare examples/problems/bank-three-zone.json examples/problems/edge-cloud-gpu.yaml
	$(PY) examples/bank_case_study.py --short

# Two workers: many tests wait on real servers and processes (Flower, Prometheus), so two share
# the CI's 2 cores well (6,133 tests: 17.3 min in one process, 9.6 min in two).
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -n 2

bench: $(STAMP)
	$(PY) benchmarks/decision_throughput.py

clean:
	rm -rf $(VENV) build *.egg-info
