"""The router: decision engine, degrade chain, circuit breakers, capability matrix, backends."""
