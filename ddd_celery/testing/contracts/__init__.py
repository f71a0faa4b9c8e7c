"""Contract suites: the same tests for every adapter of a port (import their modules)."""
