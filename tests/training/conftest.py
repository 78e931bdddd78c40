"""Fixtures for the training tests: the front end's compiled-device fixture and kernel counter."""
from tests.frontend.conftest import device, kernels  # noqa: F401
