"""tolk-cuda: the CUDA backend of Tolk. Import-light: pycuda and libcuda are touched by the probe only."""
