"""Rendering: the C-style base every dialect builds on, and the public C-compile helper."""
