# dgxspark.cluster — entry points. `make run` is the README's first command, `make test` its second.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV := .venv
BIN := $(VENV)/bin
NODES ?= 4
INVENTORY ?= inventories/4node
PYTEST := $(BIN)/pytest
MOLECULE_SCENARIOS := $(sort $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml))))

.PHONY: help setup setup-runtime system-deps run plan lint yamllint ansible-lint sanity unit \
	build promtool bench-lab bench-network bench-deploy bench-distribute bench-serving bench-release bench-backends bench-fleet lab-up lab-down lab-status lab-test \
	test-lab-mp test-lab-more molecule test clean

help:
	@echo "make setup-runtime - a controller's install: Ansible and the runtime packages in .venv/ (make setup adds the test tools)"
	@echo "make run    - set everything up, bring up the 4-node virtual Spark lab and run the main job on it"
	@echo "make test   - install what is needed and run every check and test (lab and molecule included)"
	@echo "make plan INVENTORY=inventories/3node - print the cluster plan for an inventory (controller only)"
	@echo "make lab-up NODES=2 | make lab-down | make lab-status"
	@echo "make test-lab-mp - the serving lab tests with vLLM's own multi-node backend (make test runs them with Ray)"
	@echo "make test-lab-more - what make test leaves out: profile patches with Ray, the fleet's two groups, molecule serving_mp and fleet_router"

setup:
	bash tools/setup.sh

# A controller's install: Ansible and the runtime packages only (no linters, no test tools).
setup-runtime:
	bash tools/setup.sh runtime

# Debian packages the checks need (shellcheck for ansible-test's shell checks).
system-deps:
	bash tools/system-deps.sh

# The users' command, on the 4-node lab: plan, network, os, ray, vllm, verify; it ends with the status table.
run: setup lab-up
	$(BIN)/ansible-playbook playbooks/discover.yml -i inventories/lab
	$(BIN)/ansible-playbook playbooks/deploy-397b.yml -i inventories/lab

plan: setup
	$(BIN)/ansible-playbook playbooks/plan.yml -i $(INVENTORY)

yamllint: setup
	$(BIN)/yamllint --strict .

ansible-lint: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/ansible-lint --profile production --nocolor

lint: yamllint ansible-lint

sanity: setup system-deps
	bash tools/sanity.sh

# promtool (Debian's, unpacked under .cache/): the alert rules' own tests; the unit tests also use it on the dashboards.
promtool:
	bash tools/promtool.sh

unit: setup promtool
	$(PYTEST) -n auto tests/unit tests/lab/test_labctl_unit.py tests/lab/test_lab_rootfs_unit.py

build: setup
	rm -rf .build/dist && mkdir -p .build/dist
	$(BIN)/ansible-galaxy collection build --output-path .build/dist .

# --serving: the serving image (vLLM's CPU build, mounted from the host) and the lab model on every node.
lab-up: setup
	bash lab/ensure-docker.sh
	$(BIN)/python lab/labctl.py up --nodes $(NODES) --serving

lab-down: setup
	$(BIN)/python lab/labctl.py down

lab-status: setup
	$(BIN)/python lab/labctl.py status

lab-test: lab-up
	$(PYTEST) -m lab tests/lab

# The serving lab modules (tests/lab/conftest.py's SERVING_MODULES, in that order) with vLLM's own multi-node backend;
# `make test` runs them with Ray, and its second lab the switch between the two (test_backend_switch_lab.py). Beside
# other labs: DGXSPARK_LAB_INSTANCE=2 DGXSPARK_LAB_STATE_SUFFIX=-2 make test-lab-mp.
LAB_SERVING_MODULES := $(addprefix tests/lab/,test_deploy_lab.py test_api_tls_lab.py test_openai_client_lab.py test_healing_lab.py test_supervisor_lab.py \
	test_deadlock_lab.py test_benchmark_lab.py test_monitoring_lab.py test_diagnose_lab.py test_security_lab.py test_profile_patches_lab.py)
test-lab-mp: lab-up
	DGXSPARK_LAB_BACKEND=mp $(PYTEST) -p no:cacheprovider -m lab -s --durations=20 $(LAB_SERVING_MODULES)

# What `make test` leaves out to fit CI's 90 minutes on its slower host (tools/test-suite.sh says why): the profile
# patches module with Ray on 2 nodes, the fleet's module (two serving groups on the 4 nodes), and molecule's serving_mp
# and fleet_router scenarios.
test-lab-more: lab-up
	DGXSPARK_LAB_NODES=2 $(PYTEST) -p no:cacheprovider -m lab -s --durations=20 tests/lab/test_profile_patches_lab.py
	$(PYTEST) -p no:cacheprovider -m lab -s --durations=20 tests/lab/test_fleet_lab.py
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/molecule test -s serving_mp
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/molecule test -s fleet_router

bench-lab: setup
	bench/lab_up

bench-network: setup
	bench/network_play --nodes $(NODES)

bench-deploy: setup
	bench/deploy --nodes $(NODES)

bench-distribute: setup
	bench/distribute

bench-preflight: setup
	bench/preflight

bench-faults: setup
	bench/faults

# Downtime of an option change, rollback.yml and an automatic rollback, against the engine's own restart.
bench-release: setup
	bench/release

# Ray and vLLM's own multi-node backend (mp) side by side: first deploy, no-op, idle CPU and memory, a worker rank lost.
bench-backends: setup
	$(BIN)/python bench/backends

# The fleet's router on the 4-node lab (issue 51): its cost, a replica killed, a rolling release. BENCH_ARGS='--part 1 --workers 1 --workers 2'
bench-fleet: setup
	$(BIN)/python bench/fleet $(BENCH_ARGS)

# Benchmark a deployed endpoint (playbooks/benchmark.yml): make bench-serving INVENTORY=inventories/4node BENCH_ARGS='-e ...'
bench-serving: setup
	$(BIN)/ansible-playbook playbooks/benchmark.yml -i $(INVENTORY) $(BENCH_ARGS)

molecule: lab-up
	set -e; for scenario in $(MOLECULE_SCENARIOS); do \
		PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/molecule test -s $$scenario; \
	done

# Every check in order, then the table of each part's duration (tools/test-suite.sh; it installs what is needed first,
# timed like the rest).
test:
	bash tools/test-suite.sh

clean:
	rm -rf .build $(VENV)
