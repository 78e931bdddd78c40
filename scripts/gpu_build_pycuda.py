"""Build pycuda's wheel from its sdist with the packages already installed (no build isolation), cuRAND off.

    python scripts/gpu_build_pycuda.py SDIST WORKDIR WHEEL_DIR [--cuda-root DIR] [--jobs N] [--libcuda-dir DIR]

Unpacks SDIST under WORKDIR, writes pycuda's siteconf.py with its own configure.py (the CUDA root, the
directory holding a `libcuda.so` to link against, `--no-cuda-enable-curand`), then runs setuptools' build
backend in this process and prints the wheel's path on the last line. This is what `pip wheel
--no-build-isolation` does, with one difference: distutils compiles an extension's sources one after another
(pycuda's are about forty C++ files, over a minute), so here they are compiled `--jobs` at a time.
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# where a libcuda to link against may be: the toolkit's stubs first (no driver needed), then the driver's own
LIBCUDA_DIRS = ("{root}/lib64/stubs", "{root}/targets/x86_64-linux/lib/stubs", "{root}/lib/stubs", "{root}/lib64",
                "/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64")


def cuda_root() -> str:
    """CUDA_HOME, else the toolkit holding the nvcc on PATH (pycuda's own default), else /usr/local/cuda; the
    first of these with include/cuda.h (an nvcc on PATH may be a wrapper script outside the toolkit)."""
    nvcc = shutil.which("nvcc")
    roots = [os.environ.get("CUDA_HOME", ""), str(Path(nvcc).resolve().parent.parent) if nvcc else "",
             "/usr/local/cuda"]
    return next((r for r in roots if r and os.path.exists(os.path.join(r, "include", "cuda.h"))), "/usr/local/cuda")


def libcuda_dir(root: str, work: Path) -> str | None:
    """A directory with `libcuda.so` for the linker: a toolkit stub, or a link to the driver's libcuda.so.1
    (images often ship only the versioned name). None when neither exists (the link step will say)."""
    dirs = [d.format(root=root) for d in LIBCUDA_DIRS]
    for d in dirs:
        if os.path.exists(os.path.join(d, "libcuda.so")):
            return d
    for d in dirs:
        if os.path.exists(so1 := os.path.join(d, "libcuda.so.1")):
            link = work / "libcuda-link"
            link.mkdir(exist_ok=True)
            if not (link / "libcuda.so").exists():
                (link / "libcuda.so").symlink_to(so1)
            return str(link)
    return None


def unpack(sdist: Path, work: Path) -> Path:
    """Extract the sdist into a fresh `work`; its single top-level directory."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with tarfile.open(sdist) as tf:
        # the "data" filter refuses links out of the tree and device files (Python >= 3.11.4 / 3.12)
        tf.extractall(work, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    (top,) = [p for p in work.iterdir() if p.is_dir()]
    return top


def parallel_compile(jobs: int) -> None:
    """Make distutils compile an extension's sources `jobs` at a time (the body of CCompiler.compile, with
    its loop over objects run in threads: each compile is a child process). Kept serial on a distutils
    without the hooks this needs."""
    import setuptools  # noqa: F401 - installs the distutils shim (setuptools' own copy of distutils)
    from setuptools._distutils import ccompiler

    classes = {ccompiler.CCompiler}
    try:  # a distutils the shim did not replace (Python < 3.12 with SETUPTOOLS_USE_DISTUTILS=stdlib)
        from distutils import ccompiler as other
        classes.add(other.CCompiler)
    except ImportError:
        pass

    def compile(self, sources, output_dir=None, macros=None, include_dirs=None, debug=False,  # noqa: A001
                extra_preargs=None, extra_postargs=None, depends=None):
        macros, objects, extra_postargs, pp_opts, build = self._setup_compile(
            output_dir, macros, include_dirs, sources, depends, extra_postargs)
        cc_args = self._get_cc_args(pp_opts, debug, extra_preargs)
        todo = [(obj, *build[obj]) for obj in objects if obj in build]
        with ThreadPoolExecutor(max(jobs, 1)) as pool:
            list(pool.map(lambda t: self._compile(t[0], t[1], t[2], cc_args, extra_postargs, pp_opts), todo))
        return objects

    for cls in classes:
        if all(hasattr(cls, h) for h in ("_setup_compile", "_get_cc_args", "_compile")):
            cls.compile = compile


def build(sdist: Path, work: Path, wheel_dir: Path, root: str, jobs: int, lib: str | None = None) -> Path:
    src = unpack(sdist, work)
    conf = [sys.executable, "configure.py", f"--cuda-root={root}", "--no-cuda-enable-curand"]
    if (lib := lib or libcuda_dir(root, work)) is not None:
        conf.append(f"--cudadrv-lib-dir={lib}")
    print("pycuda configure:", " ".join(conf[1:]), flush=True)
    subprocess.run(conf, cwd=src, check=True)
    parallel_compile(jobs)
    from setuptools.build_meta import __legacy__ as backend  # pycuda names no backend: pip's default is this one
    wheel_dir.mkdir(parents=True, exist_ok=True)
    os.chdir(src)
    sys.path.insert(0, str(src))  # setup.py imports aksetup_helper from beside it
    name = backend.build_wheel(str(wheel_dir.resolve()))
    return wheel_dir.resolve() / name


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sdist", type=Path)
    ap.add_argument("work", type=Path)
    ap.add_argument("wheel_dir", type=Path)
    ap.add_argument("--cuda-root", default=None)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--libcuda-dir", default=None, help="a directory with libcuda.so (default: searched)")
    args = ap.parse_args()
    wheel = build(args.sdist.resolve(), args.work.resolve(), args.wheel_dir, args.cuda_root or cuda_root(), args.jobs,
                  args.libcuda_dir)
    print(wheel)
    return 0 if glob.glob(str(wheel)) else 1


if __name__ == "__main__":
    sys.exit(main())
