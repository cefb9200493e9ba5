# The two commands of the README. Each bootstraps .venv first (a no-op when it is up to date).
.PHONY: demo test bootstrap

bootstrap:
	@scripts/bootstrap.sh

demo: bootstrap
	.venv/bin/routerscope demo

test: bootstrap
	.venv/bin/python -m pytest -n 2 --dist loadfile
