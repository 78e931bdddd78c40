"""Host-memory stand-ins for a device's parts, for tests that build devices of their own: an allocator over
bytearrays, a compiler that keeps the source as bytes, a program that runs nothing."""
from __future__ import annotations

from tolk_core.runtime import Allocator, Compiler, Program


class HostAllocator(Allocator):
    def _alloc(self, nbytes):
        return bytearray(nbytes)

    def copyin(self, handle, src):
        handle[:] = src

    def copyout(self, dest, handle):
        dest[:] = handle


class TextCompiler(Compiler):
    def compile(self, src):
        return src.encode()


class Runs(Program):
    def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals=(), wait=False):
        return None
