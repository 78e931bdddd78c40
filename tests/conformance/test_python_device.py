"""The PYTHON reference device: Tolk's parity cases through the suite's case runner, the interpreter's C
semantics and refusals, and its registration (always there, never disabled)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.frontend import test_parity
from tolk_core.errors import CompileError, ConfigError
from tolk_core.ir.dtype import dtypes
from tolk_core.plugins import BackendSpec, Device, PluginWarning, get_registry, hookimpl, register
from tolk_core.runtime import Buffer
from tolk_core.runtime.python import KernelRuntimeError, parse_module
from tolk_core.testing.programs import run_cases

PARITY = test_parity.CASES
_RESULTS: dict[str, object] = {}


@pytest.mark.parametrize("name", sorted(PARITY))
def test_parity_case_on_python(name):
    """Every parity case of tests/frontend/test_parity.py, realized together on PYTHON, against numpy."""
    if not _RESULTS:
        _RESULTS.update(run_cases("PYTHON", PARITY, test_parity._inputs))
    got = _RESULTS[name]
    if isinstance(got, Exception):
        raise got
    test_parity.check(name, got)  # the parity module's own inputs and comparison


def _run(src: str, name: str, arrays: list[np.ndarray], vals: tuple[int, ...] = ()) -> list[np.ndarray]:
    dev = Device["PYTHON"]
    lib = dev.compiler.compile(src)
    bufs = [Buffer("PYTHON", a.size, dtypes.from_np(a.dtype)).copyin(memoryview(a.reshape(-1).view(np.uint8)))
            for a in arrays]
    dev.runtime(dev, name, lib)(*(b.handle for b in bufs), vals=vals)
    out = []
    for a, b in zip(arrays, bufs, strict=True):
        r = np.empty_like(a)
        b.copyout(memoryview(r.reshape(-1).view(np.uint8)))
        out.append(r)
    return out


def test_integer_division_truncates_and_max_keeps_nan_like_c():
    src = """kernel k(b0:int32:w, b1:int32:w, b2:float32:w, b3:int32:r, b4:float32:r)
  v0 = RANGE index index:4
    v1 = LOAD int32 b3 v0
    v2 = IDIV int32 v1 int32:3
    STORE b0 v0 v2
    v3 = MOD int32 v1 int32:3
    STORE b1 v0 v3
    v4 = LOAD float32 b4 v0
    v5 = MAX float32 v4 float32:0.0
    STORE b2 v0 v5
  END v0
"""
    x = np.array([-7, 7, -1, 5], np.int32)
    f = np.array([np.nan, -1, 2, -0.5], np.float32)
    q, r, m, _, _ = _run(src, "k", [np.zeros(4, np.int32), np.zeros(4, np.int32), np.zeros(4, np.float32), x, f])
    assert q.tolist() == [-2, 2, 0, 1] and r.tolist() == [-1, 1, -1, 2]  # C: toward zero, sign of the dividend
    assert np.isnan(m[0]) and m[1:].tolist() == [0, 2, 0]


def test_reduction_over_an_empty_loop_gives_the_identity_and_vals_bind():
    src = """kernel k(b0:float32:w, b1:float32:r, $n)
  v0 = DEFINE_REG float32 MAX
  v1 = RANGE index $n
    v2 = LOAD float32 b1 v1
    ASSIGN MAX v0 v2
  END v1
  STORE b0 index:0 v0
"""
    out = _run(src, "k", [np.zeros(1, np.float32), np.arange(3, dtype=np.float32)], vals=(0,))[0]
    assert out[0] == -np.inf
    out = _run(src, "k", [np.zeros(1, np.float32), np.arange(3, dtype=np.float32)], vals=(3,))[0]
    assert out[0] == 2


def test_out_of_range_index_is_refused():
    src = """kernel k(b0:float32:w)
  v0 = RANGE index index:5
    STORE b0 v0 float32:1.0
  END v0
"""
    with pytest.raises(KernelRuntimeError, match="store index 4 out of range for a buffer of 4 elements"):
        _run(src, "k", [np.zeros(4, np.float32)])


def test_bad_text_is_a_compile_error_naming_the_line():
    with pytest.raises(CompileError, match="unknown op 'FROB'"):
        parse_module("kernel k(b0:float32:w)\n  v0 = FROB float32 b0\n")
    with pytest.raises(CompileError, match="unknown dtype 'float33'"):
        parse_module("kernel k(b0:float33:w)\n")


def test_python_is_there_with_no_plugins_and_cannot_be_disabled(tolk_env, monkeypatch):
    monkeypatch.setenv("TOLK_PLUGINS", "")
    reg = get_registry()
    assert reg.names == ["PYTHON"] and Device.DEFAULT == "PYTHON"
    assert {p.dist for p in reg.plugins if p.state == "disabled"} >= {"tolk-cpu", "tolk-opencl"}
    monkeypatch.setenv("TOLK_DISABLE_PLUGINS", "python")
    with pytest.raises(ConfigError, match="cannot be disabled"):
        from tolk_core.plugins import refresh
        refresh()


def test_the_name_python_is_reserved(tolk_env):
    mod = type(sys)("impostor")
    mod.tolk_backends = hookimpl(lambda: [BackendSpec(name="PYTHON", device="x:Y")])
    register(mod, name="impostor")
    with pytest.warns(PluginWarning, match="reserved"):
        reg = get_registry()
    assert reg.get("PYTHON").plugin.dist == "tolk-core"
    bad = next(p for p in reg.plugins if p.name == "impostor")
    assert bad.state == "broken" and "reserved" in bad.reason


def test_demo_runs_on_python_with_all_plugins_disabled(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOLK_")} | {"TOLK_PLUGINS": "",
                                                                                 "XDG_CONFIG_HOME": str(tmp_path)}
    def demo(*flags: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "tolk_core", "demo", *flags], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    inference = demo("--infer")  # the MLP forward and the attention head, each checked against numpy
    assert "tolk demo on PYTHON" in inference and inference.count("PASS") == 2
    training = demo("--quick")  # a short training run, jitted
    assert "device            PYTHON" in training and "held-out accuracy" in training


def test_devices_check_runs_the_smoke_subset(tolk_env, capsys):
    from tolk_core.cli import main
    assert main(["devices", "--check"]) == 0
    row = next(ln for ln in capsys.readouterr().out.splitlines() if " PYTHON " in ln)
    assert "PASS" in row
