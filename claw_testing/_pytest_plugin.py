"""The pytest plugin that ``pip install trio-claw`` registers (entry point ``pytest11``).

Fixtures are added here as the harness grows; see :mod:`claw_testing`.
"""
