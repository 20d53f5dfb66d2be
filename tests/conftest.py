"""Shared test configuration."""

# pytester runs user-style test files through the claw_testing plugin (tests/claw_testing).
pytest_plugins = ["pytester"]
