"""Model references (``provider/model``) and the registry that resolves them.

A provider is registered by name with a factory that builds a :class:`Model`
for a model name; ``ollama/qwen3:8b`` resolves to the ``ollama`` factory
called with ``"qwen3:8b"``. Everything after the first ``/`` is the model
name, so ``openrouter/meta-llama/llama-3-8b`` names provider ``openrouter``.

:meth:`ModelRegistry.complete_with_fallback` tries a chain of references in
order. Any :class:`ModelError` moves on to the next reference except
:class:`ContextOverflowError`, which is re-raised at once: an overflow is a
property of the conversation, and the turn runner answers it by compacting.
``pinned=True`` uses exactly the primary reference, which is what an explicit
``model`` override (for example a flush plan's) asks for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

import attrs

from ._errors import (
    AllModelsFailedError,
    ContextOverflowError,
    ModelError,
    ModelRegistryError,
    UnknownModelProviderError,
)
from ._messages import AssistantMessage, Message, ToolSpec
from ._model import Model
from ._ref import ModelRef, validate_provider

logger = logging.getLogger("claw.models")

ProviderFactory = Callable[[str], Model]
"""Builds the :class:`Model` for a model name of one provider."""


@attrs.frozen
class ModelCompletion:
    """The answer of a fallback chain: the message, who answered, and who failed first."""

    message: AssistantMessage
    ref: ModelRef
    failed_attempts: tuple[tuple[ModelRef, ModelError], ...] = ()


@attrs.define
class ModelRegistry:
    """Model providers by name; resolves references and runs fallback chains.

    Resolved models are cached per reference, so a client (and its connection
    pool) is built once.
    """

    _factories: dict[str, ProviderFactory] = attrs.field(factory=dict, init=False)
    _models: dict[ModelRef, Model] = attrs.field(factory=dict, init=False)

    def register_provider(self, name: str, factory: ProviderFactory) -> None:
        """Register ``factory`` for references ``name/<model>``; a taken name is refused."""
        validate_provider(name)
        if name in self._factories:
            raise ModelRegistryError(f"model provider {name!r} is already registered")
        self._factories[name] = factory

    def providers(self) -> tuple[str, ...]:
        """The registered provider names, sorted."""
        return tuple(sorted(self._factories))

    def resolve(self, ref: str | ModelRef) -> Model:
        """The model for ``ref``, built by its provider's factory on first use."""
        parsed = ModelRef.parse(ref)
        model = self._models.get(parsed)
        if model is None:
            factory = self._factory(parsed)
            model = factory(parsed.model)
            self._models[parsed] = model
        return model

    def chain(
        self,
        primary: str | ModelRef,
        fallbacks: Iterable[str | ModelRef] = (),
        *,
        pinned: bool = False,
    ) -> tuple[ModelRef, ...]:
        """The references a call would try, in order, without duplicates.

        Every reference is parsed and its provider checked up front, so a typo
        in the last fallback fails before any model is called.
        """
        refs = [ModelRef.parse(primary)]
        if not pinned:
            for ref in fallbacks:
                parsed = ModelRef.parse(ref)
                if parsed not in refs:
                    refs.append(parsed)
        for parsed in refs:
            self._factory(parsed)
        return tuple(refs)

    async def complete_with_fallback(
        self,
        primary: str | ModelRef,
        fallbacks: Iterable[str | ModelRef] = (),
        *,
        messages: Sequence[Message],
        system_prompt: str,
        tools: Sequence[ToolSpec],
        pinned: bool = False,
    ) -> ModelCompletion:
        """Ask the chain ``primary, *fallbacks`` in order; return the first answer.

        A :class:`ModelError` moves on to the next reference, except a
        :class:`ContextOverflowError`, which propagates at once. When every
        reference failed, raises :class:`AllModelsFailedError` listing each
        attempt. Errors that are not model errors (bugs, cancellation)
        propagate untouched. ``pinned=True`` ignores ``fallbacks``.
        """
        refs = self.chain(primary, fallbacks, pinned=pinned)
        failed: list[tuple[ModelRef, ModelError]] = []
        for ref in refs:
            model = self.resolve(ref)
            try:
                message = await model.complete(
                    messages=messages, system_prompt=system_prompt, tools=tools
                )
            except ContextOverflowError:
                raise
            except ModelError as exc:
                failed.append((ref, exc))
                logger.warning("model %s failed (%s: %s)", ref, type(exc).__name__, exc)
                continue
            if failed:
                logger.info("model %s answered after %d failed attempt(s)", ref, len(failed))
            return ModelCompletion(message=message, ref=ref, failed_attempts=tuple(failed))
        raise AllModelsFailedError(failed) from failed[-1][1]

    def _factory(self, ref: ModelRef) -> ProviderFactory:
        try:
            return self._factories[ref.provider]
        except KeyError:
            known = ", ".join(self.providers()) or "none"
            raise UnknownModelProviderError(
                f"model reference '{ref}' names provider {ref.provider!r}, which is not "
                f"registered (registered: {known})"
            ) from None
