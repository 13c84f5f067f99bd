"""What a node prints, checked at the boundary: one schema per record kind, and the checks of a
node's records against its own facts.

A node is not trusted. Everything it prints passes here before any reader of the controller
sees it:

- ``text``: every node-supplied string cleaned of control characters, escape sequences and bidi
  overrides, and bounded;
- ``fields`` and ``tables``: the kinds of value a field may hold, and the schema of every record
  as data (the record's fields; per probe and metric its value's range, params and details; the
  facts);
- ``records``: one record decoded strictly (no NaN, no Infinity) and checked: a wrong type is
  the host's ``probe_error``, a value out of range an ``error`` record in its place;
- ``bounds``: the physical ceiling of a measurement (the SKU's figure times a margin, or a
  generic ceiling for a model the table lacks);
- ``node``: a node's records against its own facts (records of GPUs it does not have dropped,
  one record per measurement, a GPU a per-GPU probe skipped not silently passed, values within
  the ceilings of its GPU model);
- ``jsonout``: strict JSON out (non-finite numbers the controller computed written as null).

Import the module you need (``gpudiag.schema.recordcheck``...): this package imports nothing, so
that gpudiag.records can use its parts and its parts can use gpudiag.records.
"""
