"""gpudiag: find the slow GPUs, NICs and links of a GPU fleet."""

__version__ = "0.1.0"
