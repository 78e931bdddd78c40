"""The runtime contracts device plugins implement: CompiledDevice, Buffer, Allocator, Compiler, Program,
Graph."""
from tolk_core.runtime.allocator import HOST_CHECK_BYTES, Allocator, copy_between, host_headroom
from tolk_core.runtime.buffer import Buffer
from tolk_core.runtime.compiler import Compiler, cache_dir, remembered_identity
from tolk_core.runtime.device import CompiledDevice
from tolk_core.runtime.program import CopyProgram, Graph, Launch, Program
from tolk_core.runtime.quiet import quietly
from tolk_core.runtime.smoke import run_smoke

__all__ = ["HOST_CHECK_BYTES", "Allocator", "Buffer", "CompiledDevice", "Compiler", "CopyProgram", "Graph",
           "Launch", "Program", "cache_dir", "copy_between", "host_headroom", "quietly", "remembered_identity",
           "run_smoke"]
