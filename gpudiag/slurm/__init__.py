"""Slurm integration: hosts from an allocation, drain and undrain through ``scontrol``, and a
launcher that runs the probe bundle with one ``srun`` step across the nodes instead of SSH.

- ``nodelist``: the hosts of ``$SLURM_JOB_NODELIST`` (folded ``gpu[001-004,010]`` syntax) and of
  ``scontrol show hostnames``.
- ``nodes``: what Slurm says about each node (state, drain reason, address).
- ``drain``: ``scontrol update ... State=DRAIN`` for ``fail`` findings; ``State=RESUME`` only for
  nodes gpudiag drained that now pass.
- ``launcher``: a connector for the sweep whose sessions run their commands through ``srun``.

Every Slurm command runs through ``commands.run_slurm``; a command that is missing, times out or
fails is a ``SlurmCommandError`` naming the command and its error output, never a crash.
"""
