"""Pooling layers: torch's MaxPool1d/2d and AvgPool1d/2d, over nn.functional's pooling functions."""
from __future__ import annotations

from collections.abc import Sequence

from tolk_core.frontend.tensor import Tensor
from tolk_core.nn import functional as F
from tolk_core.nn.module import Module

Size = int | Sequence[int]


class _MaxPool(Module):
    def __init__(self, kernel_size: Size, stride: Size | None = None, padding: Size = 0, dilation: Size = 1,
                 return_indices: bool = False, ceil_mode: bool = False):
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode


class MaxPool1d(_MaxPool):
    """torch's MaxPool1d (stride defaults to the kernel size; padding is -inf)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool1d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                            self.return_indices)


class MaxPool2d(_MaxPool):
    """torch's MaxPool2d (stride defaults to the kernel size; padding is -inf)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                            self.return_indices)


class AvgPool1d(Module):
    """torch's AvgPool1d."""

    def __init__(self, kernel_size: Size, stride: Size | None = None, padding: Size = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool1d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)


class AvgPool2d(Module):
    """torch's AvgPool2d."""

    def __init__(self, kernel_size: Size, stride: Size | None = None, padding: Size = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None):
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad, self.divisor_override = ceil_mode, count_include_pad, divisor_override

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
                            self.divisor_override)
