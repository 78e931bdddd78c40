import pytest

from tolk_core import config


@pytest.fixture(autouse=True)
def _spec_on():
    """The spec validator is on in every IR test."""
    with config.override(SPEC=1):
        yield
