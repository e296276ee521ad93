# stacktune: the two commands people need are `make tune` and `make test`.
# Everything else here is what those two are made of.
SHELL := /bin/bash
VENV ?= .venv
export VENV
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# Resolve stacktune.gpu from this working tree (collections/ links to it), never from an
# older copy installed elsewhere.
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/collections
# Tools that install the collection for themselves (molecule) do so in a home of our own,
# so a copy of stacktune.gpu in ~/.ansible never shadows the working tree.
export ANSIBLE_HOME := $(HOME)/.cache/stacktune/ansible-home
export CONTAINERS_CONF := $(CURDIR)/tests/molecule/containers.conf
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# cryptography 51 warns on every ansible command that ansible-core's ssh-agent support imports
# DSA ("DSA is deprecated ..."); nothing a user can act on, so that one message is hidden.
comma := ,
export PYTHONWARNINGS := $(if $(PYTHONWARNINGS),$(PYTHONWARNINGS)$(comma))ignore:DSA is deprecated
# The venvs of the other supported ansible-core versions (requirements-cores.txt), inside
# .venv so that every tool that skips .venv skips them too: make cores
CORES_VENVS ?= $(VENV)/cores
export CORES_VENVS
# Extra arguments for ansible-playbook, e.g. make tune ARGS="--check --diff". They are split as a
# shell splits them, except that JSON after -e stays whole even unquoted (tools/playbook.py):
# ARGS='-e {"stacktune_layers": ["memory"]}' and ARGS='-e @vars.yml' both reach ansible-playbook.
ARGS ?=
export ARGS
PLAYBOOK = $(VENV)/bin/python tools/playbook.py
# Extra arguments for pytest in make unit, e.g. PYTEST_ARGS="-k diagnose"
PYTEST_ARGS ?=
# Extra arguments for benchmarks/gate_replay.py in make bench-gate, e.g. REPLAY_ARGS="--draws 50"
REPLAY_ARGS ?=
# The molecule scenarios by where `make test` runs them. Those whose verdict depends on what
# they measure on this machine run alone after the three lanes; the others run in the lanes,
# beside lint and unit tests (a privileged container there changes no live value of the machine
# that another scenario sets or reads). docs/safety.md describes `safety`.
SCENARIOS_TIMED ?= gate diagnose
SCENARIOS_LANE_A ?= safety
SCENARIOS_LANE_B ?= fleet cpuio layers
SCENARIOS_LANE_C ?= live search faults failures privileged cpuio_tree grubby_tree default
# Molecule scenarios run by `make test` and `make molecule` (space separated), e.g. SCENARIOS=layers
SCENARIOS ?= $(SCENARIOS_TIMED) $(SCENARIOS_LANE_A) $(SCENARIOS_LANE_B) $(SCENARIOS_LANE_C)
PY_SOURCES := plugins tests benchmarks

.PHONY: tune verify drift rollback calibrate diagnose facts test lint sanity unit installed molecule cores deps-cores test-safety test-gpu bench bench-gate bench-facts bench-drift deps-run deps-test image clean

## make tune: set up .venv and tune this machine (ansible-playbook tune.yml, local inventory)
tune: deps-run
	$(PLAYBOOK) tune.yml

## make verify: compare every setting stacktune manages with the live and persisted state (read-only)
verify: deps-run
	$(PLAYBOOK) playbooks/verify.yml

## make drift: report drift and settings another file overrides at the next boot; ARGS="-e stacktune_drift_fix=true" corrects drift
drift: deps-run
	$(PLAYBOOK) playbooks/drift.yml

## make rollback: put back everything stacktune changed, in reverse order of application
rollback: deps-run
	$(PLAYBOOK) playbooks/rollback.yml

## make calibrate: measure the host's block-to-block noise and what the gate's budget can resolve (changes nothing)
calibrate: deps-run
	$(PLAYBOOK) playbooks/calibrate.yml

## make diagnose: where the program the gate measures is bound, with its evidence (read-only)
diagnose: deps-run
	$(PLAYBOOK) playbooks/diagnose.yml

## make facts: print the GPU topology of the inventory's hosts
facts: deps-run
	$(PLAYBOOK) playbooks/facts.yml

## make test: every check CI runs: lint, sanity, unit tests, the installed collection, molecule scenarios, the other ansible-core versions
# Three lanes, then the timed scenarios alone. Lane A: lint, sanity, the unit tests, then the
# molecule scenarios of SCENARIOS_LANE_A. Lane B: the other ansible-core versions' venvs, sanity
# and unit tests and the cores scenario, then the scenarios of SCENARIOS_LANE_B. Lane C: the
# scenarios of SCENARIOS_LANE_C, the first ones mostly waiting (a lease to expire, live trials),
# then the installed collection. A scenario beside others judges step times its program prints, never
# ones it times (--printed). Lanes B's and C's output follows lane A's; a part that failed is named
# last, with its error lines (tools/test-failure.sh), where a log's tail shows it. Then the scenarios of
# SCENARIOS_TIMED (a gate or a diagnosis judging what it measures on this machine) run alone,
# after the unit tests marked alone (pytest.ini), which lane A leaves out.
# A scenario runs only if SCENARIOS names it.
# docs/benchmarks.md has the times.
test: deps-test image
	@set -e -o pipefail; lane="$$(mktemp "$${TMPDIR:-/tmp}/stacktune-lane-b.XXXXXX")"; lanec="$$lane.c"; lanea="$$lane.a"; \
	echo "== lane B, beside lane A: the other ansible-core versions, then molecule $(strip $(filter $(SCENARIOS),$(SCENARIOS_LANE_B))) ($$(date -u +%T))"; \
	echo "== lane C, beside lane A: molecule $(strip $(filter $(SCENARIOS),$(SCENARIOS_LANE_C))), then the installed collection ($$(date -u +%T))"; \
	( $(MAKE) --no-print-directory deps-cores && tools/test-cores.sh \
	  && $(MAKE) --no-print-directory molecule SCENARIOS="$(filter $(SCENARIOS),$(SCENARIOS_LANE_B))" ) > "$$lane" 2>&1 & other=$$!; \
	( $(MAKE) --no-print-directory molecule SCENARIOS="$(filter $(SCENARIOS),$(SCENARIOS_LANE_C))" \
	  && $(MAKE) --no-print-directory installed ) > "$$lanec" 2>&1 & third=$$!; \
	main=0; { $(MAKE) --no-print-directory lint sanity unit PYTEST_ARGS='-m "not gpu and not alone"' \
	  && $(MAKE) --no-print-directory molecule SCENARIOS="$(filter $(SCENARIOS),$(SCENARIOS_LANE_A))"; } 2>&1 \
	  | tee "$$lanea" || main=$$?; \
	cores=0; wait $$other || cores=$$?; \
	waiting=0; wait $$third || waiting=$$?; \
	echo "== lane B, run beside the above (done $$(date -u +%T)):"; \
	cat "$$lane"; \
	echo "== lane C, run beside the above:"; \
	cat "$$lanec"; \
	[ $$main -eq 0 ] || tools/test-failure.sh "lane A (lint, sanity, unit, then its scenarios)" "$$lanea" >&2; \
	[ $$cores -eq 0 ] || tools/test-failure.sh "lane B (the other ansible-core versions, then its scenarios)" "$$lane" >&2; \
	[ $$waiting -eq 0 ] || tools/test-failure.sh "lane C (its scenarios, then the installed collection)" "$$lanec" >&2; \
	rm -f "$$lane" "$$lanea" "$$lanec"; \
	[ $$main -eq 0 ] && [ $$cores -eq 0 ] && [ $$waiting -eq 0 ] || exit 1; \
	echo "== unit tests that judge how busy this machine is, alone ($$(date -u +%T))"; \
	pytest -m alone 2>&1 | tee "$$lanea" \
	  || { tools/test-failure.sh "the unit tests marked alone" "$$lanea" >&2; rm -f "$$lanea"; exit 1; }; \
	$(MAKE) --no-print-directory molecule SCENARIOS="$(filter $(SCENARIOS),$(SCENARIOS_TIMED))" 2>&1 | tee "$$lanea" \
	  || { tools/test-failure.sh "the timed scenarios (run alone)" "$$lanea" >&2; rm -f "$$lanea"; exit 1; }; \
	rm -f "$$lanea"

deps-run:
	@tools/bootstrap.sh run

deps-test:
	@tools/bootstrap.sh test

deps-cores:
	@tools/bootstrap.sh cores

lint: deps-test
	ruff check $(PY_SOURCES)
	ruff format --check $(PY_SOURCES)
	yamllint -s .
	rm -rf $(ANSIBLE_HOME)/collections/ansible_collections/stacktune
	ansible-lint
	tools/changelog-check.sh

sanity: deps-test
	tools/sanity.sh

unit: deps-test
	pytest $(PYTEST_ARGS)

## make installed: build and install the tarball, then run the entry points from an empty directory as a user who is not root
installed: deps-test
	tests/integration/installed.sh

image: deps-test
	tests/molecule/build-image.sh

# A scenario's reports live in molecule's ephemeral directory, which a killed run leaves behind:
# they are removed first, so that a scenario counts only its own run's reports.
molecule: image
	@set -e; for s in $(SCENARIOS); do echo "== molecule scenario $$s ($$(date -u +%T))"; \
	  rm -rf "$(ANSIBLE_HOME)"/tmp/molecule.*."$$s"/reports; molecule test -s $$s; done

## make cores: sanity, unit tests and the cores scenario (tune, gate, rollback) on every other supported ansible-core
cores: deps-test deps-cores image
	tools/test-cores.sh

## make test-safety: only the safety scenario (bad input, kill points, lock, check fidelity, rollback, hygiene)
test-safety: image
	molecule test -s safety

## make test-gpu: the GPU tier, on a machine with an NVIDIA GPU (needs pytest and pynvml there)
test-gpu:
	python3 -m pytest -m gpu -o addopts="" -p no:cacheprovider tests/gpu $(ARGS)

bench: bench-gate bench-facts bench-drift

## make bench-gate: the gate, its whole-budget form, the earlier rule and Mann-Whitney on recorded real blocks; then on simulated hosts
bench-gate: deps-run
	$(VENV)/bin/python benchmarks/gate_replay.py $(REPLAY_ARGS)
	$(VENV)/bin/python benchmarks/gate_bench.py $(ARGS)

bench-facts: deps-run
	$(VENV)/bin/python benchmarks/facts_bench.py $(ARGS)

bench-drift: deps-test image
	$(VENV)/bin/python benchmarks/drift_bench.py $(ARGS)

clean:
	rm -rf reports .pytest_cache .ruff_cache tests/output
