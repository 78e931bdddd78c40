"""The front end's fixtures (every compiled device, kernel counting) for the scheduler's placement tests."""
from tests.frontend.conftest import device, kernels  # noqa: F401 - re-exported fixtures
