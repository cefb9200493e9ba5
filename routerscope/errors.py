"""Errors that the command line turns into one clear line (no traceback)."""


class RouterscopeError(Exception):
    """A problem the user can act on. The message says what happened and what to do next."""


class ConfigError(RouterscopeError):
    """A setting is invalid (unknown DSN scheme, bad number, ...)."""


class BrokerUnavailable(RouterscopeError):
    """No Kafka broker answers at the configured bootstrap address."""


class WarehouseError(RouterscopeError):
    """The warehouse cannot be opened or a migration cannot be applied."""
