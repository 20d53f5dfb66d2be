"""Model references: ``provider/model`` strings, parsed and checked."""

from __future__ import annotations

import re

import attrs

from .._errors import ClawError


class InvalidModelRefError(ClawError, ValueError):
    """A model reference is not a ``provider/model`` string."""


_PROVIDER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_MODEL = re.compile(r"[^\s/][^\s]*\Z")


def _check_provider(_inst: object, _attr: attrs.Attribute[str], value: str) -> None:
    validate_provider(value)


def validate_provider(value: object) -> None:
    if not isinstance(value, str) or not _PROVIDER.match(value):
        raise InvalidModelRefError(
            f"model provider {value!r} must be letters, digits, '.', '_' or '-' "
            "(for example 'ollama')"
        )


def _check_model(_inst: object, _attr: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not _MODEL.match(value):
        raise InvalidModelRefError(
            f"model name {value!r} must be non-empty, without spaces, and not start "
            "with '/' (for example 'qwen3:8b')"
        )


@attrs.frozen
class ModelRef:
    """A parsed ``provider/model`` reference; ``str(ref)`` gives the string back."""

    provider: str = attrs.field(validator=_check_provider)
    model: str = attrs.field(validator=_check_model)

    @classmethod
    def parse(cls, ref: str | ModelRef) -> ModelRef:
        """Parse ``"provider/model"``; raises :class:`InvalidModelRefError` with an example."""
        if isinstance(ref, ModelRef):
            return ref
        if not isinstance(ref, str):
            raise InvalidModelRefError(
                f"model reference must be a string, got {type(ref).__name__}"
            )
        provider, sep, model = ref.partition("/")
        if not sep:
            raise InvalidModelRefError(
                f"model reference {ref!r} must be 'provider/model', for example 'ollama/qwen3:8b'"
            )
        try:
            return cls(provider, model)
        except InvalidModelRefError as exc:
            raise InvalidModelRefError(f"model reference {ref!r}: {exc}") from None

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}"
