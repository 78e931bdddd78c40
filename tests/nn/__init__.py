"""Tests of tolk_core.nn's layers against torch. The shared comparison helper's asserts are rewritten (and so
counted as the calling test's checks), registered here before any test module imports it."""
import pytest

pytest.register_assert_rewrite("tests.nn.torch_check")
