"""Runtime contracts: Allocator cache, Buffer, hand-written kernels on CPU and OPENCL, Graph, compile cache."""
from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import types
import uuid

import numpy as np
import pytest

from tolk_core import config
from tolk_core.errors import BufferSizeError, CompileError
from tolk_core.plugins import BackendSpec, Device, hookimpl, register
from tolk_core.render.ccompile import compile_c, load_shared
from tolk_core.runtime import Allocator, Buffer, CompiledDevice, Compiler, Graph, Launch, Program, cache_file

F32 = np.dtype(np.float32)


class CountingAllocator(Allocator):
    def __init__(self):
        super().__init__()
        self.allocs, self.frees = 0, []

    def _alloc(self, nbytes):
        self.allocs += 1
        return memoryview(bytearray(nbytes))

    def _free(self, handle, nbytes):
        self.frees.append(nbytes)

    def copyin(self, handle, src):
        handle[:] = src

    def copyout(self, dest, handle):
        dest[:] = handle

    def offset(self, handle, byte_offset, nbytes):
        return handle[byte_offset:byte_offset + nbytes]


class NoKernels(Compiler):
    """A memory-only device's compiler (the device contract requires one, docs/plugins.md section 4)."""

    def compile(self, src):
        raise CompileError("MEM runs no kernels", src, "")


class NoLaunch(Program):
    def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals=(), wait=False):
        raise RuntimeError("MEM runs no kernels")


class MemDevice(CompiledDevice):
    def __init__(self, name):
        super().__init__(name, CountingAllocator(), NoKernels(), NoLaunch)


@pytest.fixture
def mem(tolk_env):
    mod = types.ModuleType("memdev")
    mod.tolk_backends = hookimpl(lambda: [BackendSpec("MEM", MemDevice, indexed=False)])
    register(mod, name="memdev")
    return Device["MEM"]


def test_allocator_free_list_reuses_and_evicts_lru():
    a = CountingAllocator()
    a.cache_limit = 100
    h1 = a.alloc(40)
    a.free(h1, 40)
    assert a.alloc(40) is h1 and a.allocs == 1 and a.cached_bytes == 0
    h2, h3, h4 = a.alloc(40), a.alloc(30), a.alloc(50)
    a.free(h1, 40)
    a.free(h3, 30)
    a.free(h2, 40)  # size 40 becomes most recently used
    a.free(h4, 50)  # 160 > 100: evict least recently used size (30) then 40s until under the limit
    assert a.frees == [30, 40] and a.cached_bytes == 90
    a.free_cache()
    assert a.cached_bytes == 0 and sorted(a.frees) == [30, 40, 40, 50]


def test_allocator_releases_cache_on_memory_error():
    a = CountingAllocator()
    a.free(a.alloc(8), 8)
    real = a._alloc
    calls = []

    def flaky(n):
        calls.append(n)
        if len(calls) == 1:
            raise MemoryError
        return real(n)
    a._alloc = flaky
    assert a.alloc(16) is not None and calls == [16, 16] and a.frees == [8]


def _use_buffer_and_views(mem) -> None:
    b = Buffer("MEM", 8, F32)
    assert not b.is_allocated and b.nbytes == 32
    b.copyin(memoryview(np.arange(8, dtype=np.float32)))
    assert b.is_allocated and mem.allocator.allocs == 1
    v = b.view(2, F32, 8)
    out = np.empty(2, np.float32)
    v.copyout(memoryview(out))
    np.testing.assert_array_equal(out, [2, 3])
    vv = v.view(1, F32, 4)  # a view of a view points at the root storage
    assert vv.base is b and vv.offset == 12
    with pytest.raises(BufferSizeError, match="source has 12 bytes but the buffer .* holds 32"):
        b.copyin(b"x" * 12)
    with pytest.raises(BufferSizeError, match="destination has 4 bytes .* holds 32"):
        b.copyout(bytearray(4))
    with pytest.raises(BufferSizeError, match="view of 8 bytes at offset 28 does not fit in a buffer of 32 bytes"):
        b.view(2, F32, 28)


def test_buffer_lazy_views_sizes_and_free(mem):
    # the buffers live in a helper's frame: the locals() snapshot pytest's assertion-pass hook takes of the
    # asserting frame would keep them alive after a `del`
    _use_buffer_and_views(mem)
    gc.collect()
    assert mem.allocator.cached_bytes == 32  # given back to the free list when unreferenced
    assert Buffer("MEM", 8, F32).allocate().handle is not None and mem.allocator.allocs == 1  # reused


# ---- hand-written kernels through the same Program contract on every available compiled device

KERNELS = {
    "CPU": """
void add_scaled(float* restrict out, const float* restrict a, const float* restrict b, int n, int k) {
  for (int i = 0; i < n; i++) out[i] = a[i] * (float)k + b[i];
}
void mul(float* restrict out, const float* restrict a, const float* restrict b, int n) {
  for (int i = 0; i < n; i++) out[i] = a[i] * b[i];
}
""",
    "OPENCL": """
__kernel void add_scaled(__global float* out, __global const float* a, __global const float* b, int n, int k) {
  int i = get_global_id(0); if (i < n) out[i] = a[i] * (float)k + b[i];
}
__kernel void mul(__global float* out, __global const float* a, __global const float* b, int n) {
  int i = get_global_id(0); if (i < n) out[i] = a[i] * b[i];
}
""",
}


@pytest.fixture(params=["CPU", "OPENCL"])
def compiled(request, tolk_env):
    rec = Device.registry.get(request.param)
    if rec is None or rec.state != "available":
        pytest.skip(f"{request.param} unavailable: {rec.reason if rec else 'not installed'}")
    dev = Device[request.param]
    return dev, dev.compiler.compile_cached(KERNELS[request.param])


def upload(dev, arr):
    return Buffer(dev.name, arr.size, F32).copyin(memoryview(arr))


def download(buf):
    out = np.empty(buf.size, np.float32)
    buf.copyout(memoryview(out))
    return out


def test_kernels_compute_correct_data(compiled):
    dev, lib = compiled
    rng = np.random.default_rng(1)
    n = 1000
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    A, B, O = upload(dev, a), upload(dev, b), Buffer(dev.name, n, F32)
    add, mul = dev.runtime(dev, "add_scaled", lib), dev.runtime(dev, "mul", lib)  # two kernels, one binary
    t = add(O.handle, A.handle, B.handle, global_size=(8, 1, 1), local_size=(128, 1, 1), vals=(n, 5), wait=True)
    assert isinstance(t, float) and t >= 0
    np.testing.assert_allclose(download(O), a * np.float32(5) + b, rtol=1e-6, atol=1e-6)  # FMA contraction allowed
    assert mul(O.handle, A.handle, B.handle, global_size=(n, 1, 1), vals=(n,)) is None
    dev.synchronize()
    np.testing.assert_array_equal(download(O), a * b)


def test_kernel_on_views(compiled):
    dev, lib = compiled
    base = upload(dev, np.arange(256, dtype=np.float32))
    out = Buffer(dev.name, 64, F32)
    a, b = base.view(64, F32, 0), base.view(64, F32, 128 * 4)  # offsets aligned for OpenCL sub-buffers
    dev.runtime(dev, "mul", lib)(out.handle, a.handle, b.handle, global_size=(64, 1, 1), vals=(64,))
    x = np.arange(256, dtype=np.float32)
    np.testing.assert_array_equal(download(out), x[:64] * x[128:192])


def test_graph_replays_and_rebinds(compiled):
    dev, lib = compiled
    x, y = np.arange(16, dtype=np.float32), np.full(16, 2, np.float32)
    X, Y, T, O = upload(dev, x), upload(dev, y), Buffer(dev.name, 16, F32), Buffer(dev.name, 16, F32)
    add, mul = dev.runtime(dev, "add_scaled", lib), dev.runtime(dev, "mul", lib)
    g = Graph(dev, [Launch(add, [T.handle, X.handle, Y.handle], [16, 3], (16, 1, 1)),
                    Launch(mul, [O.handle, T.handle, X.handle], [16], (16, 1, 1))])
    g()
    dev.synchronize()
    np.testing.assert_array_equal(download(O), (x * 3 + y) * x)
    X2 = upload(dev, x + 1)
    g.update(0, bufs=[T.handle, X2.handle, Y.handle], vals=[16, 1])
    assert g(wait=True) >= 0
    np.testing.assert_array_equal(download(O), ((x + 1) + y) * x)
    with pytest.raises(ValueError, match="takes 1 values"):
        g.update(1, vals=[1, 2])


def test_self_test_passes(compiled):
    assert compiled[0].self_test().startswith("a*k+b")


# ---- C compile helper and the compile cache


def test_compile_c_and_load_shared():
    lib = load_shared(compile_c("int twice(int x) { return 2 * x; }", "cc", ["-O1"]))
    assert lib.twice(21) == 42


def test_compile_error_carries_source_and_log():
    with pytest.raises(CompileError) as e:
        compile_c("void f( { }", "cc", [])
    assert e.value.source == "void f( { }" and "error" in e.value.log and "cc failed" in str(e.value)
    with pytest.raises(CompileError, match="C compiler 'no-such-cc' not found"):
        compile_c("", "no-such-cc", [])


class CountingCompiler(Compiler):
    kind = "test"

    def __init__(self, flags=""):
        super().__init__()
        self.flags, self.calls = flags, 0

    def identity(self):
        return f"counting flags={self.flags}"

    def compile(self, src):
        self.calls += 1
        return f"BIN[{self.flags}]{src}".encode()


def test_compile_cache_memory_disk_and_key(tolk_env, tmp_path):
    with config.override(CACHE_DIR=str(tmp_path / "cache")):
        c1 = CountingCompiler()
        assert c1.compile_cached("k") == b"BIN[]k" and c1.compile_cached("k") == b"BIN[]k" and c1.calls == 1
        c2 = CountingCompiler()
        assert c2.compile_cached("k") == b"BIN[]k" and c2.calls == 0  # from disk
        c3 = CountingCompiler("-O3")  # flags are part of the key
        assert c3.compile_cached("k") == b"BIN[-O3]k" and c3.calls == 1
        entries = [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and p.suffix != ".lock"]
        assert len(entries) == 2 and not any(p.name.endswith(".tmp") for p in entries)
        assert c1.cache_path("k").parent.parent == tmp_path / "cache" / "compile" / "test"


def test_cache_dir_default_follows_xdg(tolk_env, tmp_path, monkeypatch):
    from tolk_core.runtime import cache_dir
    monkeypatch.delenv("TOLK_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xc"))
    assert cache_dir() == tmp_path / "xc" / "tolk"


def test_cpu_cache_key_includes_resolved_target(tolk_env):
    from tolk_cpu.runtime import CPUCompiler
    native, generic = CPUCompiler(flags=["-O2", "-march=native"]), CPUCompiler(flags=["-O2"])
    assert native.identity() == CPUCompiler(flags=["-O2", "-march=native"]).identity()  # deterministic
    assert "target=" in native.identity() and native.cache_key("x") != generic.cache_key("x")


def test_two_processes_compiling_the_same_source_share_one_entry(tmp_path):
    src = f"int tolk_probe_{uuid.uuid4().hex}(void) {{ return 7; }}"
    script = textwrap.dedent(f"""
        import sys
        from tolk_core.render.ccompile import load_shared
        from tolk_cpu.runtime import CPUCompiler
        calls = []
        class C(CPUCompiler):
            def compile(self, src):
                calls.append(1)
                return super().compile(src)
        lib = C(flags=["-O2"]).compile_cached({src!r})
        assert getattr(load_shared(lib), {src.split()[1].split("(")[0]!r})() == 7
        print(len(calls))
    """)
    env = {**__import__("os").environ, "TOLK_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert sorted(int(o[0]) for o in outs) == [0, 1]  # one compiled, the other waited and read its entry
    entries = [p for p in (tmp_path / "compile").rglob("*") if p.is_file() and p.suffix != ".lock"]
    assert len(entries) == 1 and cache_file.read_entry(entries[0], "binary")[:4] == b"\x7fELF"


def test_compiler_identity_is_remembered_per_facts(tmp_path):
    from tolk_core.runtime import remembered_identity
    asked: list[str] = []

    def ask(answer):
        return lambda: asked.append(answer) or answer
    with config.override(CACHE_DIR=str(tmp_path)):
        assert remembered_identity("gcc 12 -O2", ask("A")) == "A"
        assert remembered_identity("gcc 12 -O2", ask("B")) == "A"  # remembered: not asked again
        assert remembered_identity("gcc 13 -O2", ask("C")) == "C"  # other facts (an upgraded compiler)
        assert remembered_identity(None, ask("D")) == "D" and remembered_identity(None, ask("E")) == "E"
    assert asked == ["A", "C", "D", "E"]
    # the CPU compiler's remembered identity equals the one it asks gcc for
    from tolk_cpu.runtime import CPUCompiler
    cc = CPUCompiler(flags=["-O2"])
    with config.override(CACHE_DIR=str(tmp_path)):
        assert cc.identity() == cc.identity() == cc._ask_compiler()
