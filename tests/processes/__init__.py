"""Real multi-process tests: ranks in spawned OS processes over the TCP transport."""
