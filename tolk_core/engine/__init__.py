"""Execution: run_linear, capture, the JIT."""
