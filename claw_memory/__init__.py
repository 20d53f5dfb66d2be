"""Memory Core: the bundled memory plugin of claw (plugin id ``memory-core``)."""
