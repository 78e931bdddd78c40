"""`Module`, the base of the layers, and the seeded initialisation every layer draws its parameters from.

- Parameters are public Tensor attributes marked `requires_grad`; buffers (`register_buffer`) are Tensor
  attributes that do not require grad: both are in the state dict (under torch's names), only parameters are
  in `parameters()`. A buffer registered with `persistent=False` is reachable as an attribute but is not in the
  state dict (torch's rule).
- `train()`/`eval()` set `training` on the module and every module reachable from its attributes.
- `to(device)` moves every parameter and buffer in place (the same Tensor objects, so an optimizer built
  before the move keeps updating them).
- Initial values are numpy draws of one seeded generator (`manual_seed`), uploaded once, so initialisation is
  reproducible and identical on every device.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from tolk_core.errors import ArgumentError
from tolk_core.frontend.tensor import Tensor
from tolk_core.nn.state import get_parameters, get_state_dict, load_state_dict

# the generator of every initial value (one slot, replaced by manual_seed)
RNG = [np.random.default_rng(0)]


def manual_seed(seed: int) -> None:
    """Seed the generator that initialises parameters (and the default seeds of Dropout layers)."""
    RNG[0] = np.random.default_rng(seed)


def param(arr: np.ndarray, device: str | None) -> Tensor:
    """A float32 parameter holding `arr` on `device`, marked requires_grad."""
    return Tensor(arr.astype(np.float32), device=device).requires_grad_()


def uniform_init(bound: float, *shape: int) -> np.ndarray:
    """Draws of U(-bound, bound) of `shape` from the seeded generator (torch's default layer initialisation)."""
    return RNG[0].uniform(-bound, bound, shape)


class Module:
    """Base of the layers: `__call__` runs `forward`; see the module docstring for state, modes and devices."""

    training: bool = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # only reached when normal lookup fails: non-persistent buffers live outside the instance dict so the
        # state dict (which walks the public attributes) does not see them
        hidden = self.__dict__.get("_nonpersistent", {})
        if name in hidden:
            return hidden[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} defines no forward()")

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Keep `tensor` as state named `name` that is not a parameter (torch's register_buffer): realized into
        its own storage (so in-place updates by `assign` work), never marked requires_grad."""
        if not name.isidentifier() or name.startswith("_"):
            raise ArgumentError(f"buffer name {name!r} must be a public identifier (the state dict skips "
                             "underscore names)")
        if tensor is not None:
            if tensor.requires_grad:
                raise ArgumentError(f"buffer {name!r} requires grad: a trainable tensor is a parameter, assign it "
                                 "as an attribute instead")
            tensor = tensor.contiguous().realize()
        if persistent:
            self.__dict__.get("_nonpersistent", {}).pop(name, None)
            setattr(self, name, tensor)
        else:
            self.__dict__.pop(name, None)
            self.__dict__.setdefault("_nonpersistent", {})[name] = tensor

    def modules(self) -> Iterator[Module]:
        """This module and every module reachable from its attributes (each once)."""
        yield from all_modules(self)

    def train(self, mode: bool = True) -> Module:
        for m in all_modules(self):
            m.training = mode
        return self

    def eval(self) -> Module:
        return self.train(False)

    def parameters(self) -> list[Tensor]:
        return get_parameters(self)

    def buffers(self) -> list[Tensor]:
        """The tensors of the state dict that are not parameters, then the non-persistent buffers."""
        own = [t for t in get_state_dict(self).values() if not t.requires_grad]
        return own + [t for m in all_modules(self) for t in m.__dict__.get("_nonpersistent", {}).values()
                      if t is not None]

    def state_dict(self) -> dict[str, Tensor]:
        return get_state_dict(self)

    def load_state_dict(self, state: dict[str, Tensor], strict: bool = True) -> None:
        load_state_dict(self, state, strict)

    def to(self, device: str | None) -> Module:
        """Move every parameter and buffer to `device` in place (each Tensor object keeps its identity and its
        requires_grad; a gradient is dropped, as it lives on the old device)."""
        tensors = {id(t): t for t in [*get_state_dict(self).values(), *self.buffers()]}
        for t in tensors.values():
            t.to_(device)
        return self


def all_modules(root: Module) -> list[Module]:
    """`root` and every Module reachable from its attributes, lists, tuples and dicts (each once)."""
    out, seen, stack = [], set(), [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, Module):
            out.append(obj)
            stack.extend(vars(obj).values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
    return out
