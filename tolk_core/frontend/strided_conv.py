"""A strided convolution as a sum of stride-1 convolutions over the input's phases.

A stride-s convolution reads its input at stride s along every strided axis, so the CPU plan, whose vector lanes
run along the output's innermost axis, gets no contiguous lanes and falls back to scalar code (a 3x3 stride-2
convolution at ResNet's shapes ran at ~3 GFLOP/s where stride 1 runs at 40-130). Splitting the input by phase
removes the stride: for a tap kh = s*a + b, input row s*i + kh = s*(i + a) + b, so with the phase copy
P_b[i] = x[s*i + b] every tap of phase b reads P_b at unit stride (row i + a). The convolution is then the sum,
over the phases that hold a tap, of a stride-1 convolution of P_b with the taps kh = b, b + s, b + 2s, ...

Only the original taps are multiplied (no kernel padded with zero taps), so an inf or NaN in the input reaches
exactly the outputs it reached before (0 x inf would make NaN where the direct convolution gives a number); the
products are the same, only the order of the sum changes (docs/performance.md, "Convolutions"). Every phase
convolution but the last is stored, and the last adds them in its epilogue: one kernel holding several
reductions gets a small register tile, one per reduction gets the convolution's own plan. Each phase
convolution is stride 1, so training reaches stride-1 convolutions' gradients too.
"""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tolk_core.frontend.tensor import Tensor


def splits_by_phase(kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> bool:
    """Whether a convolution is computed by phases: some axis is strided, and there is no dilation. A 1 x 1
    strided convolution has one phase, a subsampled copy, after which it is a matmul: 1024 to 2048 channels
    from 14 x 14 to 7 x 7 took 36.7 ms read at stride 2 and 3.4 ms so."""
    return all(d == 1 for d in dilation) and any(s > 1 for s in stride)


def phase_conv(x: Tensor, weight: Tensor, groups: int, stride: tuple[int, ...], out_sp: tuple[int, ...]) -> Tensor:
    """The convolution (N, C_out, *out_sp) of the padded input `x` (N, C_in, *spatial) by `weight`
    (C_out, C_in/groups, *kernel) at `stride`, without bias, as a sum of stride-1 convolutions of its phases."""
    nd = len(stride)
    n, cin = x.shape[:2]
    kernel = weight.shape[2:]
    # rows of each phase: the output's rows plus the taps that phase 0 (the one with the most) adds
    half = tuple(o + -(-k // s) - 1 for o, k, s in zip(out_sp, kernel, stride, strict=True))
    sized = _fit(x, tuple(s * h for s, h in zip(stride, half, strict=True)))
    split = sized.reshape((n, cin) + tuple(v for s, h in zip(stride, half, strict=True) for v in (h, s)))
    # (N, C_in, *phase, *rows): each phase a contiguous block of unit-stride rows
    order = (0, 1) + tuple(3 + 2 * i for i in range(nd)) + tuple(2 + 2 * i for i in range(nd))
    phases = split.permute(order).contiguous()
    total: Tensor | None = None
    for phase in itertools.product(*(range(min(s, k)) for s, k in zip(stride, kernel, strict=True))):
        taps = tuple(-(-(k - b) // s) for k, b, s in zip(kernel, phase, stride, strict=True))
        rows = tuple(o + t - 1 for o, t in zip(out_sp, taps, strict=True))
        part = phases.shrink(((0, n), (0, cin)) + tuple((b, b + 1) for b in phase) + tuple((0, r) for r in rows))
        part = part.reshape((n, cin) + rows)
        w = weight[(slice(None), slice(None)) + tuple(slice(b, None, s) for b, s in zip(phase, stride, strict=True))]
        y = part.conv2d(w, groups=groups)
        total = y if total is None else total.contiguous() + y
    assert total is not None  # phase 0 always holds tap 0
    return total


def _fit(x: Tensor, sizes: tuple[int, ...]) -> Tensor:
    """`x` with its spatial axes cut or zero-extended at the end to `sizes`: rows past the input are never
    read by a tap (each phase convolution is cut to exactly the rows its taps read)."""
    lead = x.ndim - len(sizes)
    have = x.shape[lead:]
    cut = tuple((0, d) for d in x.shape[:lead]) + tuple((0, min(h, s)) for h, s in zip(have, sizes, strict=True))
    x = x.shrink(cut) if any(h > s for h, s in zip(have, sizes, strict=True)) else x
    extra = tuple((0, max(0, s - h)) for h, s in zip(have, sizes, strict=True))
    return x.pad(((0, 0),) * lead + extra) if any(e for _, e in extra) else x
