# The two commands of the README. Each bootstraps .venv first (a no-op when it is up to date).
.PHONY: demo test lint bootstrap

bootstrap:
	@scripts/bootstrap.sh

demo: bootstrap
	.venv/bin/routerscope demo

test: bootstrap
	.venv/bin/python -m pytest -n 2 --dist loadfile

# Style: the formatter's output and the linter's rules (pyproject.toml [tool.ruff]), and the layers contract
# (tests/unit/test_layers.py: nothing below the command layer imports it); CI runs it before the tests.
lint: bootstrap
	.venv/bin/ruff format --check .
	.venv/bin/ruff check .
	.venv/bin/python -m pytest -q -p no:cacheprovider tests/unit/test_layers.py
