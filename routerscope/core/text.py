"""How numbers read, in the terminal and on the pages alike: one definition of a percentage, a plain
number, an interval and a cost. An unknown value reads "—", never 0 or nan."""

from __future__ import annotations

DASH = "—"


def pct(value: float | None, digits: int = 1) -> str:
    """0.1234 → "12.3%"."""
    return DASH if value is None else f"{100 * value:.{digits}f}%"


def num(value: float | None, digits: int = 2) -> str:
    """1234.5 → "1,234.50"."""
    return DASH if value is None else f"{value:,.{digits}f}"


def ci(interval, digits: int = 1) -> str:
    """A 95 % interval after its value: " [10.0%, 14.2%]"; nothing when it is unknown."""
    return "" if interval is None else f" [{pct(interval[0], digits)}, {pct(interval[1], digits)}]"


def money(value: float | None) -> str:
    """US dollars to a hundredth of a cent: "$1,234.5678"."""
    return DASH if value is None else f"${value:,.4f}"


def counts(by_name: dict[str, int], what: str = "served by") -> str:
    """{"device": 3, "cloud": 2} → "served by the device 3, the cloud 2" (largest first); "none served" when empty."""
    if not by_name:
        return "none " + what.split()[0]
    parts = sorted(by_name.items(), key=lambda kv: (-kv[1], kv[0]))
    return what + " " + ", ".join(f"the {name} {n:,}" for name, n in parts)


def verdict(value: str | None) -> str:
    """A readiness verdict as the terminal and the pages say it: "not_ready" → "not ready" ("—" when none). The
    JSON keeps the key."""
    return DASH if not value else value.replace("_", " ")


def estimate(est: dict | None, low_coverage: float) -> str:
    """A population estimate (docs/metrics.md §3c) for people: "29.1% [27.0%, 31.3%]", with "⚠ labels cover 62% of
    them" when its strata's coverage is under `low_coverage`; "—" when there is none."""
    if not est or est.get("rate") is None:
        return DASH
    low = (
        ""
        if est.get("coverage") is None or est["coverage"] >= low_coverage
        else f" ⚠ labels cover {pct(est['coverage'], 0)} of them"
    )
    return f"{pct(est['rate'])}{ci(est.get('ci'))}{low}"
