"""tolk-opencl: the OpenCL backend of Tolk (pyopencl). Import-light: pyopencl is imported by the probe."""
