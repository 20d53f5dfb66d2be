"""claw_testing: the deterministic harness for testing agents and plugins built on claw."""
