"""A compiler's failure reaches the user as a CompileError naming the device, the plugin that provides it and
the kernels being compiled: a plugin compiler that raises something else (its bug), and a C compiler that
exits 0 without writing the shared object (a CC that is not a C compiler)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from tolk_core import config
from tolk_core.errors import CompileError
from tolk_core.frontend.tensor import Tensor
from tolk_core.plugins import Device
from tolk_core.render.ccompile import compile_c

_fresh = itertools.count(1)


def fresh_kernel(device: str) -> Tensor:
    """A computation whose kernel no cache holds yet: a constant no other test uses."""
    return Tensor(np.ones(3, np.float32), device=device) * (1000.5 + next(_fresh) / 7)


def test_a_plugin_compiler_raising_its_own_exception_is_named(device, monkeypatch) -> None:
    def broken(src: str) -> bytes:
        raise RuntimeError("internal failure in the plugin")

    monkeypatch.setattr(Device[device].compiler, "compile", broken)
    provider = "tolk-cpu" if device == "CPU" else "tolk-opencl"
    with config.override(DISABLE_COMPILER_CACHE=1), pytest.raises(
            CompileError, match=rf"compiling kernel\(s\) E_\w+ for {device}\S* \(plugin {provider} .*\): the compiler "
                                r"raised RuntimeError: internal failure in the plugin.*report it") as e:
        fresh_kernel(device).numpy()
    assert isinstance(e.value.__cause__, RuntimeError) and "E_" in e.value.source  # the source it was given


def test_a_compile_error_keeps_its_log_and_gains_the_device_and_kernels(device, monkeypatch) -> None:
    def failing(src: str) -> bytes:
        raise CompileError("syntax error", src, "line 3: expected ';'")

    monkeypatch.setattr(Device[device].compiler, "compile", failing)
    with config.override(DISABLE_COMPILER_CACHE=1), pytest.raises(
            CompileError, match=rf"compiling kernel\(s\) E_\w+ for {device}\S* \(plugin .*\): syntax error") as e:
        fresh_kernel(device).numpy()
    assert e.value.log == "line 3: expected ';'" and "expected ';'" in str(e.value)


def test_a_c_compiler_that_writes_no_output_is_named(monkeypatch) -> None:
    with pytest.raises(CompileError, match=r"true exited 0 but wrote no shared object.*is 'true' a C compiler\?"):
        compile_c("int f(void) { return 0; }", "true", [])
    monkeypatch.setattr(Device["CPU"].compiler, "cc", "true")
    with config.override(DISABLE_COMPILER_CACHE=1), pytest.raises(
            CompileError, match=r"compiling kernel\(s\) E_\w+ for CPU \(plugin tolk-cpu .*\): true exited 0 but wrote "
                                r"no shared object"):
        fresh_kernel("CPU").numpy()
