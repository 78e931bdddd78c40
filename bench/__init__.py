"""Tolk's benchmark suite: `python -m bench --device D --quick --json PATH` (see bench.suite)."""
