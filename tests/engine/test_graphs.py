"""Graph capabilities: CPU (one C driver call per replay), OpenCL (pre-bound kernel objects), CUDA (driver-API
graphs, checked against a fake driver: node building and parameter patching)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import tolk_core
from tolk_core.frontend.tensor import Tensor
from tolk_core.ir.dtype import dtypes
from tolk_core.ir.ops import Op
from tolk_core.runtime import Buffer, Launch

C_KERNELS = {
    "CPU": ("void axpb(float* restrict o, const float* restrict a, int n, int k) "
            "{ for (int i = 0; i < n; i++) o[i] = a[i] * k + 1; }",
            "void twice(float* restrict o, const float* restrict a) { for (int i = 0; i < 16; i++) o[i] = 2 * a[i]; }"),
    "OPENCL": ("__kernel void axpb(__global float* o, __global const float* a, int n, int k) "
               "{ int i = get_global_id(0); if (i < n) o[i] = a[i] * k + 1; }",
               "__kernel void twice(__global float* o, __global const float* a) "
               "{ int i = get_global_id(0); o[i] = 2 * a[i]; }"),
}


def test_device_graph_replays_and_patches_inputs_and_values(device) -> None:
    from tolk_core.plugins import Device
    dev = Device[device]
    src = C_KERNELS[device]
    lib = dev.compiler.compile_cached("\n".join(src) + "\n")
    axpb, twice = dev.runtime(dev, "axpb", lib), dev.runtime(dev, "twice", lib)
    f32 = dtypes.float32
    a, mid, out, a2 = (Buffer(dev.name, 16, f32) for _ in range(4))
    a.copyin(memoryview(np.arange(16, dtype=np.float32)))
    a2.copyin(memoryview(np.full(16, 10, np.float32)))
    launches = [Launch(axpb, [mid.handle, a.handle], [16, 3], (16, 1, 1), None, src[0]),
                Launch(twice, [out.handle, mid.handle], [], (16, 1, 1), None, src[1])]
    graph = dev.graph(dev, launches)
    assert type(graph).__name__ == {"CPU": "CPUGraph", "OPENCL": "OpenCLGraph"}[device]

    def result() -> np.ndarray:
        host = np.empty(16, np.float32)
        out.copyout(memoryview(host))
        return host
    graph()
    np.testing.assert_array_equal(result(), (np.arange(16) * 3 + 1) * 2)
    graph.update(0, bufs=[mid.handle, a2.handle], vals=[16, 5])
    graph(wait=True)
    np.testing.assert_array_equal(result(), np.full(16, (10 * 5 + 1) * 2))
    # every launch's buffers at once (what an eager realize does before each replay): back to `a`, into `a2`
    graph.rebind([mid.handle, a.handle, a2.handle, mid.handle])
    graph(wait=True)
    host = np.empty(16, np.float32)
    a2.copyout(memoryview(host))
    np.testing.assert_array_equal(host, (np.arange(16) * 5 + 1) * 2)
    with pytest.raises(ValueError, match="rebind of 3 buffers on a graph whose launches take 4"):
        graph.rebind([mid.handle, a.handle, a2.handle])


def test_base_graph_rebinds_through_update() -> None:
    """The base Graph's `rebind` (what a plugin's Graph that does not override it gets): each launch whose
    buffers changed is updated, in Python."""
    from tolk_core.plugins import Device
    from tolk_core.runtime import Graph
    dev = Device["CPU"]
    lib = dev.compiler.compile_cached(C_KERNELS["CPU"][1] + "\n")
    twice = dev.runtime(dev, "twice", lib)
    a, b, c = (Buffer(dev.name, 16, dtypes.float32) for _ in range(3))
    a.copyin(memoryview(np.arange(16, dtype=np.float32)))
    graph = Graph(dev, [Launch(twice, [b.handle, a.handle]), Launch(twice, [c.handle, b.handle])])
    updated: list[int] = []
    real = graph.update
    graph.update = lambda i, **kw: updated.append(i) or real(i, **kw)  # type: ignore[method-assign]
    graph.rebind([b.handle, a.handle, a.handle, b.handle])  # the first launch's buffers are unchanged
    graph()
    host = np.empty(16, np.float32)
    a.copyout(memoryview(host))
    np.testing.assert_array_equal(host, np.arange(16) * 4)
    assert updated == [1]
    with pytest.raises(ValueError, match="rebind of 5 buffers on a graph whose launches take 4"):
        graph.rebind([b.handle, a.handle, c.handle, a.handle, b.handle])


def test_cpu_replay_is_one_native_call() -> None:
    jitted = tolk_core.jit(lambda x: ((x + 1).contiguous() * 2).contiguous().exp())
    for i in range(2):
        jitted(Tensor(np.full(8, i, np.float32), device="CPU"))
    cap = jitted.captured
    (call,) = cap.linear.src
    assert call.src[0].op is Op.CUSTOM_FUNCTION and len(call.src[0].src[0].src) == 3
    (step,) = cap._steps
    calls = []
    real = step.graph._fn
    step.graph._fn = lambda *args: calls.append(args) or real(*args)
    out = jitted(Tensor(np.full(8, 0.5, np.float32), device="CPU"))
    assert len(calls) == 1
    np.testing.assert_allclose(out.numpy(), np.exp((np.full(8, 0.5) + 1) * 2), rtol=1e-6)


# ---------------------------------------------------------------------------------------------- CUDA, faked
class FakeCuda:
    """Records the driver calls CUDAGraph makes; reads the structs it is given like the driver would."""

    def __init__(self) -> None:
        self.nodes: list[dict] = []
        self.set_params: list[tuple[int, list[int]]] = []
        self.launches = 0
        self.modules: list[bytes] = []
        self.nargs: dict[int, tuple[int, int]] = {}  # function handle -> (buffers, values)

    @staticmethod
    def _args(p, nb: int, nv: int) -> list[int]:
        addrs = [p.kernelParams[i] for i in range(nb + nv)]
        return [ctypes.c_uint64.from_address(x).value for x in addrs[:nb]] + \
               [ctypes.c_int32.from_address(x).value for x in addrs[nb:]]

    def cuGraphCreate(self, graph, flags):  # noqa: N802 - driver names
        graph._obj.value = 1
        return 0

    def cuModuleLoadData(self, mod, image):  # noqa: N802
        self.modules.append(image.value)
        mod._obj.value = len(self.modules)
        return 0

    def cuModuleGetFunction(self, fn, mod, name):  # noqa: N802
        fn._obj.value = {b"axpb": 100, b"twice": 200}[name]
        return 0

    def cuGraphAddKernelNode(self, node, graph, deps, ndeps, params):  # noqa: N802
        p = params._obj
        nb, nv = {100: (2, 2), 200: (2, 0)}[p.func]
        self.nodes.append({"func": p.func, "grid": (p.gridDimX, p.gridDimY, p.gridDimZ),
                           "block": (p.blockDimX, p.blockDimY, p.blockDimZ), "args": self._args(p, nb, nv),
                           "deps": [deps[i] for i in range(ndeps)]})
        node._obj.value = 1000 + len(self.nodes)
        return 0

    def cuGraphInstantiateWithFlags(self, exec_, graph, flags):  # noqa: N802
        exec_._obj.value = 7
        return 0

    def cuGraphExecKernelNodeSetParams(self, exec_, node, params):  # noqa: N802
        p = params._obj
        self.set_params.append((node.value, self._args(p, *{100: (2, 2), 200: (2, 0)}[p.func])))
        return 0

    def cuGraphLaunch(self, exec_, stream):  # noqa: N802
        self.launches += 1
        return 0

    def cuStreamSynchronize(self, stream):  # noqa: N802
        return 0

    def cuGraphExecDestroy(self, exec_):  # noqa: N802
        return 0

    def cuGraphDestroy(self, graph):  # noqa: N802
        return 0


class _Prg:
    def __init__(self, name: str):
        self.name, self.lib = name, b"\x7fELF-cubin"


def test_cuda_graph_builds_nodes_and_patches_parameters(monkeypatch) -> None:
    from tolk_cuda.graph import CUDAGraph
    fake = FakeCuda()
    monkeypatch.setattr(CUDAGraph, "driver", staticmethod(lambda: fake))
    launches = [Launch(_Prg("axpb"), [0x1000, 0x2000], [16, 3], (4, 1, 1), (4, 1, 1)),
                Launch(_Prg("twice"), [0x3000, 0x1000], [], (2, 2), (8,))]
    graph = CUDAGraph(None, launches)
    assert fake.modules == [b"\x7fELF-cubin"], "one module load per distinct binary"
    assert fake.nodes == [
        {"func": 100, "grid": (4, 1, 1), "block": (4, 1, 1), "args": [0x1000, 0x2000, 16, 3], "deps": []},
        {"func": 200, "grid": (2, 2, 1), "block": (8, 1, 1), "args": [0x3000, 0x1000], "deps": [1001]},
    ]
    graph()
    assert fake.launches == 1 and fake.set_params == [], "nothing changed: no parameter is pushed"
    graph.update(0, bufs=[0x1000, 0x5000], vals=[16, 9])
    graph(wait=True)
    assert fake.set_params == [(1001, [0x1000, 0x5000, 16, 9])] and fake.launches == 2
    graph()
    assert len(fake.set_params) == 1, "a patch is pushed once"

