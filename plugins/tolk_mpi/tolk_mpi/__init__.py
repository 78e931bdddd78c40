"""tolk-mpi: a collectives provider over MPI (mpi4py), docs/plugins.md section 12. Importing this package is
light: mpi4py (and MPI_Init) load only when a process group is joined."""
