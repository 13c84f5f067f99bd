"""gpudiag's node-side probe bundle.

Runs with the node's own Python as ``python -m probes ...`` from the bundle folder and prints
one JSON line per measurement. It imports only the standard library, torch and pynvml.
"""
