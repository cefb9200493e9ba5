"""Dagster resources: the project's settings, so every asset reads the same configuration as the CLI."""

import os

import dagster as dg

from routerscope.settings import Settings


class RouterscopeResource(dg.ConfigurableResource):
    """Where the broker and the warehouse are. Unset fields fall back to the environment
    (`ROUTERSCOPE_HOME`, `ROUTERSCOPE_KAFKA_BOOTSTRAP`, `ROUTERSCOPE_CLICKHOUSE_DSN`, … — DESIGN §6)."""

    home: str | None = None
    kafka_bootstrap: str | None = None
    clickhouse_dsn: str | None = None

    @classmethod
    def for_settings(cls, settings: Settings) -> "RouterscopeResource":
        """The resource that points where `settings` points (for runs launched from Python)."""
        return cls(
            home=str(settings.home), kafka_bootstrap=settings.kafka_bootstrap(), clickhouse_dsn=settings.warehouse.raw
        )

    def settings(self) -> Settings:
        env = dict(os.environ)
        for name, value in (
            ("ROUTERSCOPE_HOME", self.home),
            ("ROUTERSCOPE_KAFKA_BOOTSTRAP", self.kafka_bootstrap),
            ("ROUTERSCOPE_CLICKHOUSE_DSN", self.clickhouse_dsn),
        ):
            if value:
                env[name] = value
        return Settings.from_env(env)
