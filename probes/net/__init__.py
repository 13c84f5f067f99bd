"""The pair tests between nodes (``python -m probes net-...``): ``main`` (the command line and
the choice of backend), ``common`` (the protocol, options and records the backends share),
``auth`` and ``messages`` (the handshake and the checked messages), and the backends ``tcp``,
``nccl`` (with its ``nccl_store`` and ``nccl_worker``) and ``perftest`` (``perftest_output``)."""
