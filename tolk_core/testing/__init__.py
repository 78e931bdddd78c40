"""Backend conformance suite for plugin authors."""
