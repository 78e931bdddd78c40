"""tolk-cpu: the CPU backend of Tolk (C source, the system C compiler, ctypes). Import-light."""
