# The two commands a new user runs: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-deep demo lint diagrams bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	$(BIN)/python -m pip install -q -e '.[test,bench]' --config-settings editable_mode=strict
	touch $(STAMP)

install: $(STAMP)
	@# strict editable installs link files one by one: refresh so new modules are seen
	@$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e . --config-settings editable_mode=strict

test: install
	$(BIN)/python -m pytest

test-deep: install
	TURNFSM_DEEP=1 $(BIN)/python -m pytest -m deep

lint: install
	$(BIN)/ruff check fsm adapters tests examples benchmarks
	$(BIN)/ruff format --check fsm adapters tests examples benchmarks
	$(BIN)/mypy

diagrams: install
	$(BIN)/python -m turnfsm diagrams --out diagrams
	@# keep the README's inline diagram equal to diagrams/outbound.mmd (a test checks it)
	$(BIN)/python -c "import re,pathlib; r=pathlib.Path('README.md'); m=pathlib.Path('diagrams/outbound.mmd').read_text(); r.write_text(re.sub(r'(<!-- diagram:outbound -->\n).*?(<!-- /diagram -->)', lambda g: g[1] + '\`\`\`mermaid\n' + m + '\`\`\`\n' + g[2], r.read_text(), flags=re.S))"

demo: install
	$(BIN)/python -m turnfsm.adapters.sim.demo --scenario $(or $(SCENARIO),greeting_barge_in) --out demo-output

bench: install
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) build *.egg-info
