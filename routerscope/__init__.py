"""routerscope: observability for a hybrid (device / cloud) LLM router.

This package holds what every other package shares: settings, names (topics, tables),
errors, the local development broker and the command line.
"""

__version__ = "0.1.0"
