PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test lint lock proto clean checkov tf-test sim-hashes sim-hashes-write system-deps sdk-ts

# the Python SDK (clients/python) goes into the same virtualenv: the outbox relay and
# the SDK's tests (pytest testpaths) use it
# at the versions of constraints/dev.txt (`make lock` moves them)
$(STAMP): pyproject.toml clients/python/pyproject.toml constraints/dev.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints/dev.txt --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints/dev.txt -e '.[dev]' -e clients/python
	touch $(STAMP)

venv: $(STAMP)

# real GitHub payloads, kept in the repository (tests/data/github-webhooks/README.md);
# `make demo PAYLOADS=` generates events instead
PAYLOADS ?= tests/data/github-webhooks
DEMO_ARGS := $(if $(PAYLOADS),--payloads $(PAYLOADS),)

demo: $(STAMP)
	$(BIN)/regionsync demo $(DEMO_ARGS)

# Debian packages the tests use, installed only when missing (CI runs as root on a clean
# machine): chromium for the console's browser tests (Playwright drives /usr/bin/chromium;
# never `playwright install`), postgresql's server binaries for the PostgreSQL store tests
# (tests/pgserver.py starts a throwaway server on loopback), faketime (libfaketime) for the
# clock skew tests (tests/integration/faketime_support.py preloads it into a node), and
# the brokers of the broker destination tests (tests/brokerserver.py starts each on loopback)
CHROMIUM := /usr/bin/chromium
HAVE_PG = ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null
HAVE_FAKETIME = ls /usr/lib/*/faketime/libfaketime*.so.1 >/dev/null 2>&1

system-deps:
	@pkgs=""; test -x $(CHROMIUM) || pkgs="chromium"; \
	$(HAVE_PG) || pkgs="$$pkgs postgresql"; \
	$(HAVE_FAKETIME) || pkgs="$$pkgs faketime"; \
	test -x /usr/lib/rabbitmq/bin/rabbitmq-server || pkgs="$$pkgs rabbitmq-server"; \
	command -v nats-server >/dev/null || pkgs="$$pkgs nats-server"; \
	command -v redis-server >/dev/null || pkgs="$$pkgs redis-server"; \
	if [ -n "$$pkgs" ]; then \
		echo "apt-get install $$pkgs"; apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$pkgs >/dev/null; \
	fi

test: $(STAMP) system-deps
	$(BIN)/python -m ruff check .
	$(BIN)/lint-imports
	$(MAKE) checkov
	$(BIN)/python -m pytest -q

# the TypeScript SDK alone: install its pinned devDependencies, compile, run its unit
# tests (`make test` runs these and its integration tests from pytest:
# tests/integration/test_sdk_typescript*.py, which start the regions they need)
sdk-ts:
	cd clients/typescript && npm ci --no-audit --no-fund && npm test

# checkov pins many dependencies: it gets its own virtualenv. Offline: terraform only, no
# policy download, no module download, no platform calls; inline skips carry their reasons.
CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
CHECKOV_REQ := 'checkov>=3.2,<4'

$(CHECKOV_STAMP): constraints/checkov.txt
	test -x $(CHECKOV_VENV)/bin/python || $(PY) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet -c constraints/checkov.txt --upgrade pip
	$(CHECKOV_VENV)/bin/python -m pip install --quiet -c constraints/checkov.txt $(CHECKOV_REQ)
	touch $(CHECKOV_STAMP)

checkov: $(CHECKOV_STAMP)
	BC_SKIP_MAPPING=TRUE \
	$(CHECKOV_VENV)/bin/checkov -d terraform --framework terraform --skip-download \
		--download-external-modules false --quiet --compact

# `terraform test` of modules/region-node with a mocked AWS provider (no account, no
# network past the provider download; TF_PLUGIN_DIR=/path uses a local provider mirror)
TF_PLUGIN_DIR ?=
tf-test:
	cd terraform/modules/region-node && \
	terraform init -backend=false -input=false $(if $(TF_PLUGIN_DIR),-plugin-dir=$(TF_PLUGIN_DIR),) >/dev/null && \
	terraform test

# trace hashes of seeds 1..30 of every simulator scenario against tests/sim/trace_hashes.json
sim-hashes: $(STAMP)
	$(BIN)/python -m sim hashes --seeds 1..30 --jobs 2 --check tests/sim/trace_hashes.json

sim-hashes-write: $(STAMP)
	$(BIN)/python -m sim hashes --seeds 1..30 --jobs 2 --write tests/sim/trace_hashes.json

lint: $(STAMP)
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .

proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=src --grpc_python_out=src --pyi_out=src proto/regionsync/v1/replication.proto

# move constraints/*.txt to the newest releases pyproject.toml's ranges admit: fresh
# scratch virtualenvs, no constraints, then their freeze (grpcio-tools stays where it is:
# its version is written into the committed generated code). Then `make test`.
LOCK_DIR := build/lock
lock:
	rm -rf $(LOCK_DIR) && $(PY) -m venv $(LOCK_DIR)/dev && $(PY) -m venv $(LOCK_DIR)/checkov
	$(LOCK_DIR)/dev/bin/python -m pip install --quiet --upgrade pip
	$(LOCK_DIR)/dev/bin/python -m pip install --quiet -e '.[dev]' -e clients/python \
		"grpcio-tools==$$(sed -n 's/^grpcio-tools==//p' constraints/dev.txt)"
	$(LOCK_DIR)/checkov/bin/python -m pip install --quiet --upgrade pip $(CHECKOV_REQ)
	{ sed -n '/^#/p' constraints/dev.txt; $(LOCK_DIR)/dev/bin/pip freeze --all --exclude-editable; } > $(LOCK_DIR)/dev.txt
	{ sed -n '/^#/p' constraints/checkov.txt; $(LOCK_DIR)/checkov/bin/pip freeze --all; } > $(LOCK_DIR)/checkov.txt
	mv $(LOCK_DIR)/dev.txt $(LOCK_DIR)/checkov.txt constraints/ && rm -rf $(LOCK_DIR)

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) build dist clients/typescript/node_modules clients/typescript/dist
