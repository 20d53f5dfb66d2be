"""claw: a Trio-native memory and context layer for AI agents."""

from ._embeddings import EmbeddingProvider as EmbeddingProvider
from ._errors import CapabilityDeniedError as CapabilityDeniedError
from ._errors import ClawError as ClawError
from ._errors import ConfigError as ConfigError
from ._errors import ContractError as ContractError
from ._errors import ForgedCapabilityError as ForgedCapabilityError
from ._errors import HostClosedError as HostClosedError
from ._errors import ProviderError as ProviderError
from ._errors import SlotConflictError as SlotConflictError
from ._errors import StaleCapabilityError as StaleCapabilityError
from ._errors import UnsupportedRequestError as UnsupportedRequestError
from ._workers import InlineWorkerPool as InlineWorkerPool
from ._workers import ThreadWorkerPool as ThreadWorkerPool
from ._workers import WorkerPool as WorkerPool
from ._workers import WorkerPoolStatistics as WorkerPoolStatistics

__version__ = "0.1.0"
