"""``python -m gpudiag``: the same as the ``gpudiag`` command."""

from .cli import main

main()
