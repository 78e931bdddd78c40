"""Quiet by default (docs/configuration.md, "Quiet output"): a compiler's own output is held back unless DEBUG>=2
or the compile fails, and `tolk demo` with cold caches prints only its own lines."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings

import pytest

from tests.conftest import has_opencl
from tolk_core import config
from tolk_core.errors import CompileError
from tolk_core.runtime import quietly


class DriverWarning(UserWarning):
    """Stands for pyopencl's CompilerWarning: a warning class of a module that is not Tolk's."""


DriverWarning.__module__ = "some_driver"


def _chatty() -> bytes:
    """A compile that talks the way PoCL and pyopencl do: on both descriptors and as a warning."""
    os.write(1, b"1 warning generated.\n")
    os.write(2, b"kernel.cl:3: note: unused\n")
    warnings.warn("Non-empty compiler output encountered", DriverWarning, stacklevel=1)
    return b"binary"


def test_compiler_output_held_back_by_default(capfd, recwarn):
    assert quietly(_chatty) == b"binary"
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    assert not [w for w in recwarn if w.category is DriverWarning]


def test_compiler_output_shown_at_debug_2(capfd, recwarn):
    with config.override(DEBUG=2):
        quietly(_chatty)
    out, err = capfd.readouterr()
    assert "1 warning generated." in err and "note: unused" in err and out == ""
    assert [str(w.message) for w in recwarn if w.category is DriverWarning] == ["Non-empty compiler output encountered"]


def test_failed_compile_carries_what_the_compiler_said(capfd):
    def failing() -> bytes:
        os.write(2, b"kernel.cl:1: error: expected ';'\n")
        raise CompileError("build failed", "src", "the driver's log")
    with pytest.raises(CompileError) as info:
        quietly(failing)
    assert info.value.log.startswith("the driver's log\n") and "expected ';'" in info.value.log
    assert "expected ';'" in str(info.value)
    assert capfd.readouterr() == ("", "")


def test_tolk_warnings_pass_through(recwarn):
    from tolk_core.errors import CacheCorruptionWarning

    def damaged() -> bytes:
        warnings.warn("cache entry damaged", CacheCorruptionWarning, stacklevel=1)
        return b""
    quietly(damaged)
    assert [str(w.message) for w in recwarn if w.category is CacheCorruptionWarning] == ["cache entry damaged"]


# `tolk demo`'s own lines (tolk_core/demo.py train_main and _progress): nothing else may appear
_DEMO_LINES = [re.compile(p) for p in (
    r"tolk demo: training a 64-128-10 classifier on scikit-learn's 8x8 digits \(1797 images\)",
    r"  \[[#.]{30}\] +\d+/\d+ steps  loss \d+\.\d{4}  \((eager|jit)\)",
    r"  device            (CPU|OPENCL:0)",
    r"  held-out accuracy \d+\.\d% of 359 images after \d+ steps \(final loss \d+\.\d{4}\)",
    r"  (eager|jit  ) step +\d+\.\d steps/s +\d+\.\d kernels/step  \(\d+ timed steps\)",
    r"  jit speedup       \d+\.\dx",
    r"  total time        \d+\.\d s",
)]


@pytest.mark.parametrize("device", ["CPU", "OPENCL"])
def test_cold_demo_prints_only_its_own_lines(device, tmp_path):
    if device == "OPENCL" and not has_opencl():
        pytest.skip("no OpenCL platform (make opencl installs PoCL)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOLK_", "PYOPENCL_")) and k != "DEBUG"}
    env.update(TOLK_CACHE_DIR=str(tmp_path / "tolk"), POCL_CACHE_DIR=str(tmp_path / "pocl"), TOLK_DEVICE=device,
               TOLK_NO_CONFIG="1")
    # both descriptors into one pipe: what a person at the terminal would see, in order
    proc = subprocess.run([sys.executable, "-m", "tolk_core", "demo", "--quick", "--steps", "20"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=300)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout
    foreign = [line for line in lines if not any(p.fullmatch(line) for p in _DEMO_LINES)]
    assert foreign == [], proc.stdout
    assert len(lines) == 1 + 10 + 6  # header, a progress line per tenth, the six report lines


def test_cc_warnings_held_back_unless_debug_2(capfd):
    from tolk_cpu.runtime import CPUCompiler
    src = '#warning "tolk quiet-output check"\nvoid tolk_quiet_check(void) {}\n'
    with config.override(DISABLE_COMPILER_CACHE=1):
        assert CPUCompiler().compile_cached(src)[:4] == b"\x7fELF"  # it compiled: a warning is no failure
        assert capfd.readouterr() == ("", "")
        with config.override(DEBUG=2):
            CPUCompiler().compile_cached(src)
    out, err = capfd.readouterr()
    assert out == "" and "#warning" in err and "tolk quiet-output check" in err
