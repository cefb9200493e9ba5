"""Errors that the command line turns into one clear line (no traceback), each with its exit code."""


class RouterscopeError(Exception):
    """A problem the user can act on. The message says what happened and what to do next."""

    exit_code = 1


class ConfigError(RouterscopeError):
    """A setting is invalid (unknown DSN scheme, bad number, ...)."""

    exit_code = 2


class BrokerUnavailable(RouterscopeError):
    """No Kafka broker answers at the configured bootstrap address."""


class WarehouseError(RouterscopeError):
    """The warehouse cannot be opened or a migration cannot be applied."""


class WarehouseOutage(WarehouseError):
    """The warehouse cannot take writes now (its disk is full, out of memory, too many parts, gone):
    a fault of the warehouse, never of the rows; the run stops with its positions where they were."""


class LoadInProgress(RouterscopeError):
    """Another load holds this warehouse (`routerscope load --no-wait`)."""

    exit_code = 75  # EX_TEMPFAIL: try again later
