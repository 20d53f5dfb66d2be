"""claw_testing: the deterministic harness for testing agents and plugins built on claw."""

from ._memory_provider import MemoryRecord as MemoryRecord
from ._memory_provider import RecordingMemoryProvider as RecordingMemoryProvider
