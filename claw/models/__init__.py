"""claw.models: conversation messages, the Model protocol, model references and clients."""

from .._util import fixup_module_metadata as _fixup_module_metadata
from ._errors import AllModelsFailedError as AllModelsFailedError
from ._errors import ContextOverflowError as ContextOverflowError
from ._errors import MessageFormatError as MessageFormatError
from ._errors import ModelAuthError as ModelAuthError
from ._errors import ModelError as ModelError
from ._errors import ModelRegistryError as ModelRegistryError
from ._errors import ModelRequestError as ModelRequestError
from ._errors import ModelResponseError as ModelResponseError
from ._errors import RetryableModelError as RetryableModelError
from ._errors import UnknownModelProviderError as UnknownModelProviderError
from ._json import JSON as JSON
from ._json import JsonObject as JsonObject
from ._messages import AssistantMessage as AssistantMessage
from ._messages import CompactionSummary as CompactionSummary
from ._messages import Message as Message
from ._messages import SystemMessage as SystemMessage
from ._messages import ToolCall as ToolCall
from ._messages import ToolResult as ToolResult
from ._messages import ToolSpec as ToolSpec
from ._messages import Usage as Usage
from ._messages import UserMessage as UserMessage
from ._messages import message_from_dict as message_from_dict
from ._messages import message_to_dict as message_to_dict
from ._model import Model as Model
from ._openai import OpenAICompatibleModel as OpenAICompatibleModel
from ._openai import openai_compatible_provider as openai_compatible_provider
from ._ref import InvalidModelRefError as InvalidModelRefError
from ._ref import ModelRef as ModelRef
from ._registry import ModelCompletion as ModelCompletion
from ._registry import ModelRegistry as ModelRegistry
from ._registry import ProviderFactory as ProviderFactory

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
