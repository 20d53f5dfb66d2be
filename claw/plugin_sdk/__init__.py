"""The one public surface a claw plugin may use.

Bundled plugins (Memory Core) import only from here, never from claw internals:
a bundled plugin gets no door that a third-party plugin lacks.
"""

from .._embeddings import EmbeddingProvider as EmbeddingProvider
from .._errors import ClawError as ClawError
from .._errors import ConfigError as ConfigError
from .._errors import ContractError as ContractError
from .._errors import ProviderError as ProviderError
from .._errors import StaleCapabilityError as StaleCapabilityError
from .._workers import InlineWorkerPool as InlineWorkerPool
from .._workers import ThreadWorkerPool as ThreadWorkerPool
from .._workers import WorkerPool as WorkerPool
from .._workers import WorkerPoolStatistics as WorkerPoolStatistics
