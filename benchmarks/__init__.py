"""claw benchmarks: retrieval quality (LoCoMo), search latency and scale, gateway load.

Each benchmark is a module run with ``python -m benchmarks.<name>``; it prints a human
table and, with ``--json``, one JSON object on the last line of stdout. They are not
part of the test suite (``tests/benchmarks`` runs each once on tiny sizes).
"""
