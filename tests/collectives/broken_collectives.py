"""A deliberately broken collectives provider (a test fixture): the reference TCP group whose allreduce max
sums instead (with out= or without). The tier must fail exactly its allreduce_max checks, by name."""
from __future__ import annotations

import numpy as np

from tolk_core.collectives.tcp import TcpGroup


class SumForMax(TcpGroup):
    name = "BROKEN"

    def _allreduce(self, a: np.ndarray, op: str) -> np.ndarray:
        return super()._allreduce(a, "sum" if op == "max" else op)

    def _allreduce_into(self, a: np.ndarray, op: str, out: np.ndarray) -> None:
        super()._allreduce_into(a, "sum" if op == "max" else op, out)


def join(timeout: float) -> SumForMax:
    g = TcpGroup.join(timeout)
    return SumForMax(g.rank, g.size, timeout, g._socks)
