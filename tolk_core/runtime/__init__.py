"""Runtime contracts plugins implement: device, Buffer, Allocator, Compiler, Program, Graph."""
