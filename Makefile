# The two commands of the README. Each bootstraps .venv first (a no-op when it is up to date).
.PHONY: demo test test-fast lint bootstrap

bootstrap:
	@scripts/bootstrap.sh

demo: bootstrap
	.venv/bin/routerscope demo

test: bootstrap
	.venv/bin/python -m pytest -n 2 --dist loadfile

# The quick check before a commit: the unit and integration tiers without the tests marked slow (docs/testing.md).
test-fast: bootstrap
	.venv/bin/python -m pytest -n 2 --dist loadfile -m "not e2e and not slow" tests/unit tests/integration

# What mypy checks (pyproject.toml [tool.mypy]: as Python 3.10): the whole package, with no per-module ignores.
# The package runs on Python 3.10-3.13, so a wrong type or a 3.11-only name (`datetime.UTC`) fails here, not in a
# user's process.
TYPED := routerscope

# Style: the formatter's output and the linter's rules (pyproject.toml [tool.ruff]), the types of $(TYPED), and
# the layers contract (tests/unit/test_layers.py: nothing below the command layer imports it); CI runs it before
# the tests.
lint: bootstrap
	.venv/bin/ruff format --check .
	.venv/bin/ruff check .
	.venv/bin/mypy $(TYPED)
	.venv/bin/python -m pytest -q -p no:cacheprovider tests/unit/test_layers.py
