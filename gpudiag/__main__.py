"""``python -m gpudiag``: the same as the ``gpudiag`` command."""

from .cli.main import main

main()
