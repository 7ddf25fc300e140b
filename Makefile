# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
# The two commands of the README: `make run` and `make test`. Both set everything up first.
SHELL := /bin/bash
.DEFAULT_GOAL := help

.PHONY: help setup run test test-fast lint clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

setup:  ## create .venv, install pinned packages, colcon build (idempotent)
	@bash scripts/bootstrap.sh

run: setup  ## the main job: coda run with the embedded defaults
	@source scripts/env.sh && coda run $(ARGS)

test: setup  ## the whole test suite (C++ and Python)
	@bash scripts/run_tests.sh $(ARGS)

test-fast: setup  ## the fast subset for development: C++ tests, pytest without the ros and slow tests
	@bash scripts/run_tests.sh --fast $(ARGS)

lint: setup  ## ruff over the workspace
	@source scripts/env.sh && ruff check .

clean:  ## remove build products (keeps .venv)
	rm -rf build install log
