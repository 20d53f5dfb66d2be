"""claw: a Trio-native memory and context layer for AI agents.

The public surface lives here; the code lives in private modules. See the README and
``docs/`` for the concepts: exclusive slots, capabilities, audiences, runs, generations.
"""

from ._capabilities import Capability as Capability
from ._capabilities import ConversationRecallPass as ConversationRecallPass
from ._capabilities import FlushIdentity as FlushIdentity
from ._capabilities import HostAuthority as HostAuthority
from ._capabilities import MemoryAudience as MemoryAudience
from ._capabilities import MemoryCallerContext as MemoryCallerContext
from ._capabilities import OperatorAuthority as OperatorAuthority
from ._capabilities import SessionAuthority as SessionAuthority
from ._config import AgentDefaultsConfig as AgentDefaultsConfig
from ._config import AgentsConfig as AgentsConfig
from ._config import CompactionConfig as CompactionConfig
from ._config import GatewayConfig as GatewayConfig
from ._config import HostConfig as HostConfig
from ._config import McpConfig as McpConfig
from ._config import MemoryFlushConfig as MemoryFlushConfig
from ._config import ModelProviderConfig as ModelProviderConfig
from ._config import ModelsConfig as ModelsConfig
from ._config import PluginEntryConfig as PluginEntryConfig
from ._config import PluginsConfig as PluginsConfig
from ._config import SlotsConfig as SlotsConfig
from ._config import StateConfig as StateConfig
from ._config import WorkersConfig as WorkersConfig
from ._embeddings import EmbeddingProvider as EmbeddingProvider
from ._errors import CapabilityDeniedError as CapabilityDeniedError
from ._errors import ClawError as ClawError
from ._errors import ConfigError as ConfigError
from ._errors import ContractError as ContractError
from ._errors import CurrencyPendingError as CurrencyPendingError
from ._errors import DatabaseError as DatabaseError
from ._errors import DatabaseUnavailableError as DatabaseUnavailableError
from ._errors import ForgedCapabilityError as ForgedCapabilityError
from ._errors import HostClosedError as HostClosedError
from ._errors import ProviderError as ProviderError
from ._errors import SchemaVersionError as SchemaVersionError
from ._errors import SlotConflictError as SlotConflictError
from ._errors import StaleCapabilityError as StaleCapabilityError
from ._errors import StorageError as StorageError
from ._errors import StorageFullError as StorageFullError
from ._errors import StorageReadOnlyError as StorageReadOnlyError
from ._errors import UnknownAgentError as UnknownAgentError
from ._errors import UnsupportedRequestError as UnsupportedRequestError
from ._events import EventLog as EventLog
from ._events import HostEvent as HostEvent
from ._host import Host as Host
from ._host import open_host as open_host
from ._input import InvalidInputError as InvalidInputError
from ._local import LocalMemory as LocalMemory
from ._local import load_workspace_config as load_workspace_config
from ._local import open_memory as open_memory
from ._plugins import ContextEngineFactoryContext as ContextEngineFactoryContext
from ._plugins import Plugin as Plugin
from ._plugins import PluginApi as PluginApi
from ._plugins import PluginContracts as PluginContracts
from ._plugins import RegisteredTool as RegisteredTool
from ._plugins import Tool as Tool
from ._runs import Run as Run
from ._scopes import HostScope as HostScope
from ._slots import SlotSelection as SlotSelection
from ._util import fixup_module_metadata as _fixup_module_metadata
from ._workers import InlineWorkerPool as InlineWorkerPool
from ._workers import ThreadWorkerPool as ThreadWorkerPool
from ._workers import WorkerPool as WorkerPool
from ._workers import WorkerPoolStatistics as WorkerPoolStatistics
from .flush import FlushPlanError as FlushPlanError
from .flush import FlushResult as FlushResult
from .flush import MemoryFlushFilePlanDraft as MemoryFlushFilePlanDraft
from .flush import MemoryFlushPlan as MemoryFlushPlan
from .flush import MemoryFlushPlanRequest as MemoryFlushPlanRequest
from .flush import MemoryFlushTiming as MemoryFlushTiming
from .flush import MemoryFlushToolsPlan as MemoryFlushToolsPlan
from .models import AssistantMessage as AssistantMessage
from .models import Model as Model
from .models import ToolCall as ToolCall
from .models import ToolResult as ToolResult
from .models import UserMessage as UserMessage
from .turns._runner import TurnResult as TurnResult
from .turns._tools import FlushToolContext as FlushToolContext
from .turns._tools import ToolContext as ToolContext
from .turns._tools import ToolPolicy as ToolPolicy

__version__ = "0.1.0"

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
