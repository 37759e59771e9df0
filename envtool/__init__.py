"""envtool: CUDA-correct, reproducible PyTorch multi-GPU environments."""

__version__ = "0.1.0"
