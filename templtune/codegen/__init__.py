"""Code generators: ``llvm`` (x86 via llvmlite) and ``cuda`` (CUDA C via nvcc)."""
