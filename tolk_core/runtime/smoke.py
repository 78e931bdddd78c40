"""A smoke check every device plugin can reuse for its self-test (``tolk devices --check``)."""
from __future__ import annotations

from tolk_core.runtime.buffer import Buffer
from tolk_core.runtime.device import CompiledDevice


def run_smoke(dev: CompiledDevice, src: str, global_size: tuple[int, ...] = (1, 1, 1),
              local_size: tuple[int, ...] | None = None) -> str:
    """Compile and run ``tolk_smoke(out, a, b, n, k)`` (out = a*k + b) on `dev`; check against numpy."""
    import numpy as np  # imported here: `import tolk_core` stays light
    n, k = 1000, 3
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    f32 = np.dtype(np.float32)
    bufs = [Buffer(dev.name, n, f32) for _ in range(3)]
    bufs[1].copyin(a.data)
    bufs[2].copyin(b.data)
    prg = dev.runtime(dev, "tolk_smoke", dev.compiler.compile_cached(src))
    prg(*(x.handle for x in bufs), global_size=global_size, local_size=local_size, vals=(n, k), wait=True)
    out = np.empty(n, np.float32)
    bufs[0].copyout(out.data)
    if not np.allclose(out, a * k + b, rtol=1e-6, atol=1e-6):
        raise AssertionError(f"smoke kernel gave wrong data: max error {np.abs(out - (a * k + b)).max()}")
    return f"a*k+b on {n} floats"
