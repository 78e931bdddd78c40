"""Codegen: simplify, optimize and linearize one kernel."""
