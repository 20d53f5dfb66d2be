"""The systems of ``python -m benchmarks.search_latency``, a module each, and what they share.

- ``system_claw``: claw through the host's memory provider handle (with
  ``claw_config``, ``claw_second_reader`` and ``_vectors``, the corpus vectors as an
  embedding provider);
- ``system_floor``: the fair floor (tantivy and numpy called directly, given what claw
  gets), exhaustive fusion and the bare lexical call;
- ``system_floor_old``: the floor of the earlier benchmark;
- ``system_sqlite``: the SQLite peers, ``fts5+vec`` and ``fts5+scan``;
- ``_shared`` (constants, the corpus on disk, the merge), ``_worker`` (a worker's side
  of the command protocol), ``_orchestrate`` (the workers and their interleaved
  passes) and ``_summary`` (the JSON keys and the report).
"""
