"""Pure kernels: words, tokens, statistics, safe values, the async bridge, the circuit breaker."""
