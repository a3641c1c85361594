PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test lint proto clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# the real GitHub payloads of shared/ when present, else generated events
PAYLOADS := $(wildcard ../shared/datasets/github-webhooks/MANIFEST.json)
DEMO_ARGS := $(if $(PAYLOADS),--payloads $(dir $(PAYLOADS)),)

demo: $(STAMP)
	$(BIN)/regionsync demo $(DEMO_ARGS)

test: $(STAMP)
	$(BIN)/python -m ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .

proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=src --grpc_python_out=src --pyi_out=src proto/regionsync/v1/replication.proto

clean:
	rm -rf $(VENV) build dist
