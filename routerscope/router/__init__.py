"""The router: decision engine, degrade chain, circuit breakers, capability matrix, backends.

It reads its routing policy with PyYAML, which the bare SDK does not bring: on such an install importing any of
it is one line naming the extra, not `No module named 'yaml'`."""

from routerscope.core.extras import require

require("routerscope.router", "pipeline", "yaml")
