"""Slurm integration: hosts from an allocation, drain and undrain through ``scontrol``, and a
launcher that runs the probe bundle with one ``srun`` step across the nodes instead of SSH.

- ``nodelist``: the hosts of ``$SLURM_JOB_NODELIST`` (folded ``gpu[001-004,010]`` syntax) and of
  ``scontrol show hostnames``.
- ``nodes``: what Slurm says about each node (state, drain reason, address).
- ``reason``: the drain reason (``gpudiag: <checks>: <finding>: <evidence> gpudiag-drain=<time>-<tail>``),
  written and read back, and the one-line safe text reasons and hook log lines are made of.
- ``resume``: NHC's rule with time in it: only gpudiag's own drain (its marker, Slurm's stamp naming
  gpudiag's user), one Slurm already showed when the check began, returns to service, and only after
  a run that made, and the node passed, each check its reason names.
- ``nodelock``: one check at a time on a node (a flock per node name, gone with its process).
- ``drain``: ``scontrol update ... State=DRAIN`` for ``fail`` findings whose action takes the
  node out of service; ``State=RESUME`` only as ``resume`` allows.
- ``launcher``: a connector for the sweep whose sessions run their commands through ``srun``.

Every Slurm command runs through ``commands.run_slurm`` in a process group of its own, within a
time limit; a command that is missing, times out (then it is ended, children and all) or fails is
a ``SlurmCommandError`` naming the command and its error output, never a crash.
"""
