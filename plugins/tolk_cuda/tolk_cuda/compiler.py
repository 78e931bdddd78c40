"""CUDA C -> cubin for one architecture (config CUDA_ARCH, default sm_90), with no GPU and no driver needed.

NVRTC (from the ``nvidia-cuda-nvrtc`` wheel, or a system libnvrtc) through ctypes, about 20 ms a kernel;
otherwise nvcc (about 200 ms a call). Compile straight to a cubin: NVRTC 13 emits a PTX ISA that older drivers
cannot JIT.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import importlib.util
import os
import shutil
import subprocess
import tempfile

from tolk_core import config
from tolk_core.errors import CompileError
from tolk_core.runtime import Compiler

# no fused multiply-add contraction: a*b+c rounds twice, as in numpy, torch's separate kernels, and the C and
# OpenCL backends (kernels that want fma will say so)
FLAGS = ("--fmad=false",)


def find_nvrtc() -> str | None:
    """Path of libnvrtc: the pip wheel first (nvidia/cu13/lib, nvidia/cuda_nvrtc/lib), then the system."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        hits = sorted(glob.glob(os.path.join(root, "*", "lib", "libnvrtc.so*")))
        hits = [h for h in hits if "builtins" not in h]
        if hits:
            return hits[-1]
    return ctypes.util.find_library("nvrtc")


def find_cuda_include() -> str | None:
    """A directory holding the CUDA headers kernels include (cuda_fp16.h, cuda_bf16.h): NVRTC has no default
    search path. CUDA_HOME, the pip wheels' include folders, then the usual toolkit location."""
    roots = [os.path.join(home, "include")] if (home := os.environ.get("CUDA_HOME")) else []
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        roots += sorted(glob.glob(os.path.join(base, "*", "include")))
    roots.append("/usr/local/cuda/include")
    return next((r for r in roots if os.path.exists(os.path.join(r, "cuda_fp16.h"))), None)


def find_nvcc() -> str | None:
    return shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)), None)


class NVRTC:
    """The few NVRTC entry points we need, bound through ctypes."""

    def __init__(self, path: str):
        self.path = path
        self.lib = ctypes.CDLL(path)
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        self.version = f"{major.value}.{minor.value}"
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def compile(self, src: str, options: list[str]) -> bytes:
        lib, prog = self.lib, ctypes.c_void_p()
        rc = lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"kernel.cu", 0, None, None)
        if rc != 0:
            raise CompileError(f"nvrtcCreateProgram failed: {lib.nvrtcGetErrorString(rc).decode()}", src)
        try:
            opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
            rc = lib.nvrtcCompileProgram(prog, len(options), opts)
            if rc != 0:
                size = ctypes.c_size_t()
                lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
                log = ctypes.create_string_buffer(size.value)
                lib.nvrtcGetProgramLog(prog, log)
                raise CompileError(f"NVRTC {self.version} failed: {lib.nvrtcGetErrorString(rc).decode()}", src,
                                   log.value.decode(errors="replace"))
            size = ctypes.c_size_t()
            lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
            out = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetCUBIN(prog, out)
            return out.raw
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))


class CUDACompiler(Compiler):
    """CUDA C -> cubin for `arch` (``sm_90`` by default). NVRTC when found, else nvcc; CompileError otherwise."""
    kind = "cuda"

    def __init__(self, arch: str | None = None, use: str | None = None):
        super().__init__()
        self.arch = arch or config.get("CUDA_ARCH")
        self.nvrtc: NVRTC | None = None
        self.nvcc: str | None = None
        self.include = find_cuda_include()
        if use in (None, "nvrtc") and (path := find_nvrtc()) is not None:
            self.nvrtc = NVRTC(path)
        elif use in (None, "nvcc"):
            self.nvcc = find_nvcc()

    @property
    def tool(self) -> str:
        if self.nvrtc is not None:
            return f"nvrtc {self.nvrtc.version}"
        return f"nvcc {self.nvcc}" if self.nvcc else "none"

    def identity(self) -> str:
        ver = ""
        if self.nvrtc is None and self.nvcc:
            ver = subprocess.run([self.nvcc, "--version"], capture_output=True, text=True).stdout.strip()[-60:]
        return f"{self.tool} {ver} arch={self.arch} flags={' '.join(FLAGS)} include={self.include}"

    def compile(self, src: str) -> bytes:
        if self.nvrtc is not None:
            include = [f"--include-path={self.include}"] if self.include else []
            return self.nvrtc.compile(src, [f"--gpu-architecture={self.arch}", "-default-device", *include, *FLAGS])
        if self.nvcc is None:
            raise CompileError("no CUDA compiler: install NVRTC (pip install 'tolk-cuda[nvrtc]') or the CUDA toolkit "
                               "(nvcc)", src)
        with tempfile.TemporaryDirectory(prefix="tolk-nvcc-") as d:
            cu, out = os.path.join(d, "kernel.cu"), os.path.join(d, "kernel.cubin")
            with open(cu, "w") as f:
                f.write(src)
            proc = subprocess.run([self.nvcc, "-cubin", f"-arch={self.arch}", *FLAGS, "-o", out, cu],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise CompileError(f"nvcc failed (exit {proc.returncode})", src, proc.stderr + proc.stdout)
            with open(out, "rb") as f:
                return f.read()
