"""Memory Core: the bundled memory plugin of claw (plugin id ``memory-core``).

``claw_memory.plugin`` is what the host loads (entry point ``claw.plugins``); the index
engine (:func:`open_memory_index`) can also be used on its own, for example from a
notebook, with an embedder of your choice.

This is a memory *provider*, one plugin behind the host's memory guard, written
against ``claw.plugin_sdk`` only. It is not ``claw.memory``: that package is the host's
side of memory (the guard every route goes through, and the contracts every provider
implements), the same whichever provider owns the memory slot.
"""

from claw.plugin_sdk import EmbeddingError as EmbeddingError
from claw.plugin_sdk import fixup_module_metadata as _fixup_module_metadata
from claw.plugin_sdk.search import HashEmbedder as HashEmbedder
from claw.plugin_sdk.search import OpenAIEmbedder as OpenAIEmbedder
from claw.plugin_sdk.search import SentenceTransformerEmbedder as SentenceTransformerEmbedder

from ._errors import IndexBusyError as IndexBusyError
from ._errors import IndexClosedError as IndexClosedError
from ._errors import IndexLockedError as IndexLockedError
from ._errors import InvalidSearchError as InvalidSearchError
from ._errors import MemoryCoreError as MemoryCoreError
from ._errors import SourcePathError as SourcePathError
from ._index import MemoryIndex as MemoryIndex
from ._index import open_memory_index as open_memory_index
from ._plugin import MemoryCoreConfig as MemoryCoreConfig
from ._plugin import MemoryCoreService as MemoryCoreService
from ._plugin import plugin as plugin
from ._settings import MemoryCoreSettings as MemoryCoreSettings
from ._transcripts import InMemoryTranscriptSource as InMemoryTranscriptSource
from ._transcripts import TranscriptSession as TranscriptSession
from ._transcripts import TranscriptSource as TranscriptSource
from ._transcripts import TranscriptTurn as TranscriptTurn
from ._transcripts import VersionedTranscriptSource as VersionedTranscriptSource
from ._types import ForgetResult as ForgetResult
from ._types import IndexStatus as IndexStatus
from ._types import ReadResult as ReadResult
from ._types import SearchFilter as SearchFilter
from ._types import SearchHit as SearchHit
from ._types import SearchResult as SearchResult
from ._types import SkippedSource as SkippedSource
from ._types import SyncReport as SyncReport

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
