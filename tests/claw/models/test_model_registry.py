import logging

import pytest

from claw.models import (
    AllModelsFailedError,
    AssistantMessage,
    ContextOverflowError,
    InvalidModelRefError,
    Model,
    ModelAuthError,
    ModelRef,
    ModelRegistry,
    ModelRegistryError,
    RetryableModelError,
    UnknownModelProviderError,
    UserMessage,
)
from claw_testing._scripted_model import ScriptedModel

ASK = {"messages": [UserMessage("hi")], "system_prompt": "", "tools": ()}


def registry_with(models: dict[str, ScriptedModel]) -> tuple[ModelRegistry, list[str]]:
    """A registry with a provider ``p`` whose models come from ``models``; logs builds."""
    built: list[str] = []
    registry = ModelRegistry()

    def factory(name: str) -> Model:
        built.append(name)
        return models[name]

    registry.register_provider("p", factory)
    return registry, built


@pytest.mark.parametrize(
    ("text", "provider", "model"),
    [
        ("ollama/qwen3:8b", "ollama", "qwen3:8b"),
        ("openrouter/meta-llama/llama-3-8b", "openrouter", "meta-llama/llama-3-8b"),
        ("lm-studio.local/gpt_oss-20b", "lm-studio.local", "gpt_oss-20b"),
    ],
)
def test_model_ref_splits_at_the_first_slash_and_prints_back(
    text: str, provider: str, model: str
) -> None:
    ref = ModelRef.parse(text)
    assert (ref.provider, ref.model) == (provider, model)
    assert str(ref) == text
    assert ModelRef.parse(ref) is ref


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("qwen3", "must be 'provider/model', for example 'ollama/qwen3:8b'"),
        ("/qwen3", "provider ''"),
        ("ollama/", "model name ''"),
        ("ollama//x", "model name '/x'"),
        ("oll ama/x", "provider 'oll ama'"),
        ("ollama/qwen 3", "model name 'qwen 3'"),
    ],
)
def test_bad_model_refs_are_refused_with_a_message_showing_the_form(
    text: str, fragment: str
) -> None:
    with pytest.raises(InvalidModelRefError) as info:
        ModelRef.parse(text)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_resolve_builds_a_model_once_per_reference() -> None:
    model = ScriptedModel([])
    registry, built = registry_with({"a": model})
    assert registry.resolve("p/a") is model
    assert registry.resolve(ModelRef("p", "a")) is model
    assert built == ["a"]


def test_unknown_provider_and_duplicate_registration_are_refused() -> None:
    registry, _ = registry_with({})
    with pytest.raises(UnknownModelProviderError, match=r"provider 'q'.*registered: p"):
        registry.resolve("q/a")
    with pytest.raises(ModelRegistryError, match="'p' is already registered"):
        registry.register_provider("p", lambda name: ScriptedModel([]))
    with pytest.raises(InvalidModelRefError):
        registry.register_provider("bad name", lambda name: ScriptedModel([]))
    assert registry.providers() == ("p",)


async def test_fallback_tries_the_chain_in_order_and_records_who_answered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = ScriptedModel([RetryableModelError("rate limited", status_code=429)])
    second = ScriptedModel([ModelAuthError("bad key", status_code=401)])
    third = ScriptedModel(["from c"])
    registry, built = registry_with({"a": first, "b": second, "c": third})
    with caplog.at_level(logging.WARNING, logger="claw.models"):
        result = await registry.complete_with_fallback("p/a", ["p/b", "p/c"], **ASK)
    assert result.message.text == "from c"
    assert result.ref == ModelRef("p", "c")
    assert [(str(ref), type(err)) for ref, err in result.failed_attempts] == [
        ("p/a", RetryableModelError),
        ("p/b", ModelAuthError),
    ]
    assert built == ["a", "b", "c"]
    assert "p/a" in caplog.text and "rate limited" in caplog.text
    for model in (first, second, third):
        assert len(model.calls) == 1
        assert model.calls[0].messages == (UserMessage("hi"),)


async def test_fallback_stops_at_the_first_model_that_answers() -> None:
    first, second = ScriptedModel(["from a"]), ScriptedModel([])
    registry, built = registry_with({"a": first, "b": second})
    result = await registry.complete_with_fallback("p/a", ["p/b"], **ASK)
    assert (result.ref, result.failed_attempts) == (ModelRef("p", "a"), ())
    assert built == ["a"]
    assert second.calls == ()


async def test_context_overflow_is_not_swallowed_by_the_fallback_chain() -> None:
    second = ScriptedModel(["never"])
    registry, _ = registry_with(
        {"a": ScriptedModel([ContextOverflowError("too long", context_window=10)]), "b": second}
    )
    with pytest.raises(ContextOverflowError, match="too long"):
        await registry.complete_with_fallback("p/a", ["p/b"], **ASK)
    assert second.calls == ()


async def test_exhausted_chain_raises_all_models_failed_listing_every_attempt() -> None:
    last = RetryableModelError("overloaded", status_code=503)
    registry, _ = registry_with(
        {"a": ScriptedModel([ModelAuthError("bad key")]), "b": ScriptedModel([last])}
    )
    with pytest.raises(AllModelsFailedError) as info:
        await registry.complete_with_fallback("p/a", ["p/b", "p/a"], **ASK)
    err = info.value
    assert [str(ref) for ref, _ in err.attempts] == ["p/a", "p/b"]
    assert err.__cause__ is last
    assert err.retryable
    assert "p/a: ModelAuthError: bad key" in str(err)


async def test_pinned_uses_exactly_the_primary_reference() -> None:
    fallback = ScriptedModel(["fallback"])
    registry, built = registry_with(
        {"a": ScriptedModel([RetryableModelError("down")]), "b": fallback}
    )
    assert registry.chain("p/a", ["p/b"], pinned=True) == (ModelRef("p", "a"),)
    with pytest.raises(AllModelsFailedError) as info:
        await registry.complete_with_fallback("p/a", ["p/b"], pinned=True, **ASK)
    assert [str(ref) for ref, _ in info.value.attempts] == ["p/a"]
    assert fallback.calls == ()
    assert built == ["a"]


async def test_a_bad_fallback_reference_fails_before_any_model_is_called() -> None:
    first = ScriptedModel(["fine"])
    registry, _ = registry_with({"a": first})
    with pytest.raises(UnknownModelProviderError, match="nope/x"):
        await registry.complete_with_fallback("p/a", ["nope/x"], **ASK)
    with pytest.raises(InvalidModelRefError):
        await registry.complete_with_fallback("p/a", ["garbage"], **ASK)
    assert first.calls == ()


async def test_errors_that_are_not_model_errors_propagate_untouched() -> None:
    second = ScriptedModel(["never"])
    registry, _ = registry_with({"a": ScriptedModel([KeyError("bug")]), "b": second})
    with pytest.raises(KeyError, match="bug"):
        await registry.complete_with_fallback("p/a", ["p/b"], **ASK)
    assert second.calls == ()


async def test_complete_result_is_the_models_message() -> None:
    reply = AssistantMessage("exact")
    registry, _ = registry_with({"a": ScriptedModel([reply])})
    assert (await registry.complete_with_fallback("p/a", **ASK)).message is reply
