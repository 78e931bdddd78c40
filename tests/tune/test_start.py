"""TUNE_START: kernels without a tuning entry are planned with the given choices (a deliberately poor plan, to
measure what the search recovers), their values unchanged; a kernel's tuning entry still wins; a malformed or
unknown choice is a named configuration error."""
from __future__ import annotations

import numpy as np
import pytest

from tolk_core import Tensor, config
from tolk_core.codegen.choices import Choices, parse
from tolk_core.engine import compile as engine_compile
from tolk_core.engine.tuned import planned_choices, start_choices
from tolk_core.errors import ConfigError
from tolk_core.plugins import Device
from tolk_core.testing import kernels

POOR = "MAX_ACCUMULATORS=4,MATMUL_NR_VECTORS=1,UNROLL_MAX=1"


def test_parse_reads_knobs_and_names_what_is_wrong():
    assert parse(" MAX_ACCUMULATORS=4, UNROLL_MAX=1 ") == Choices.of({"MAX_ACCUMULATORS": 4, "UNROLL_MAX": 1})
    with pytest.raises(ValueError, match="not KNOB=INTEGER"):
        parse("MAX_ACCUMULATORS")
    with pytest.raises(ValueError, match="unknown optimizer choice"):
        parse("NOT_A_KNOB=3")


def test_a_malformed_start_is_refused_by_the_setting():
    with pytest.raises(ConfigError, match="TUNE_START"), config.override(TUNE_START="MAX_ACCUMULATORS:4"):
        pass


def test_an_unknown_knob_in_the_start_is_a_named_error():
    with config.override(TUNE_START="NOT_A_KNOB=3"), pytest.raises(ConfigError, match="TUNE_START.*NOT_A_KNOB"):
        start_choices()


def test_kernels_without_an_entry_are_planned_with_the_start(tmp_path):
    ast = kernels.build(lambda a, b: a @ b, ((64, 80), "float32"), ((80, 96), "float32")).calls[0].src[0]
    with config.override(CACHE_DIR=str(tmp_path)):
        dev = Device["CPU"]
        assert planned_choices(ast, "CPU", dev) is None  # nothing tuned, no start: the heuristics
        with config.override(TUNE_START=POOR):
            assert planned_choices(ast, "CPU", dev) == parse(POOR)
            poor = engine_compile.render_together([ast], dev.renderer, cached=False,
                                                  choices_of=lambda a: planned_choices(a, "CPU", dev))[1][0]
        plain = engine_compile.render_together([ast], dev.renderer, cached=False)[1][0]
    assert poor.source != plain.source  # the start changes the plan


def test_values_under_a_poor_start_equal_numpy(tmp_path):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((67, 45)).astype(np.float32), rng.standard_normal((45, 51)).astype(np.float32)
    with config.override(CACHE_DIR=str(tmp_path), TUNE_START=POOR):
        got = (Tensor(a) @ Tensor(b)).relu().numpy()
    np.testing.assert_allclose(got, np.maximum(a.astype(np.float64) @ b, 0), rtol=1e-4, atol=1e-4)
