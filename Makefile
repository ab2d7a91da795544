# dgxspark.cluster — entry points. `make run` is the README's first command, `make test` its second.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV := .venv
BIN := $(VENV)/bin
NODES ?= 4
INVENTORY ?= inventories/4node

.PHONY: help setup system-deps run plan lint yamllint ansible-lint sanity unit build test clean

help:
	@echo "make run    - set everything up and run the main job"
	@echo "make test   - install what is needed and run every check and test"
	@echo "make plan INVENTORY=inventories/3node - print the cluster plan for an inventory"

setup:
	bash tools/setup.sh

# Debian packages the checks need (shellcheck for ansible-test's shell checks).
system-deps:
	bash tools/system-deps.sh

run: setup
	$(BIN)/ansible-playbook playbooks/plan.yml -i $(INVENTORY)

plan: setup
	$(BIN)/ansible-playbook playbooks/plan.yml -i $(INVENTORY)

yamllint: setup
	$(BIN)/yamllint --strict .

ansible-lint: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/ansible-lint --profile production

lint: yamllint ansible-lint

sanity: setup system-deps
	bash tools/sanity.sh

unit: setup
	$(BIN)/pytest

build: setup
	rm -rf .build/dist && mkdir -p .build/dist
	$(BIN)/ansible-galaxy collection build --output-path .build/dist .

test: setup system-deps lint sanity unit build
	@echo "make test: all checks passed"

clean:
	rm -rf .build $(VENV)
