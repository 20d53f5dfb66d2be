import pytest
import trio

from claw.models import (
    AssistantMessage,
    ContextOverflowError,
    Model,
    SystemMessage,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    UserMessage,
)
from claw_testing._scripted_model import (
    ScriptedFailure,
    ScriptedModel,
    ScriptedReply,
    ScriptExhaustedError,
    estimate_tokens,
)

SEARCH = ToolSpec("search", "search memory", {"type": "object"})


async def test_scripted_model_plays_replies_tool_calls_and_failures_in_order() -> None:
    model = ScriptedModel(
        [
            ScriptedReply(tool_calls=[("search", {"q": "cats"})], usage=Usage(10, 2)),
            ContextOverflowError("too long"),
            "done",
        ],
        context_window=4096,
    )
    assert isinstance(model, Model)
    assert model.context_window == 4096
    first = await model.complete(messages=[UserMessage("hi")], system_prompt="sys", tools=[SEARCH])
    assert first == AssistantMessage(
        "", tool_calls=(ToolCall("call_1_0", "search", {"q": "cats"}),), usage=Usage(10, 2)
    )
    with pytest.raises(ContextOverflowError):
        await model.complete(messages=[], system_prompt="", tools=[])
    third = await model.complete(messages=[], system_prompt="", tools=[])
    assert third.text == "done"
    assert model.remaining == 0
    model.assert_script_consumed()


async def test_scripted_model_records_what_each_call_received() -> None:
    model = ScriptedModel(["a", "b"])
    history = [
        SystemMessage("be brief"),
        UserMessage("first"),
        AssistantMessage("", tool_calls=[ToolCall("c1", "search", {})]),
        ToolResult("c1", "search", "nothing"),
        UserMessage("second"),
    ]
    await model.complete(messages=history, system_prompt="P", tools=[SEARCH])
    await model.complete(messages=history[:2], system_prompt="Q", tools=())
    first, second = model.calls
    assert first.messages == tuple(history)
    assert (first.system_prompt, first.tool_names, first.tools) == ("P", ("search",), (SEARCH,))
    assert first.last_user_text == "second"
    assert (second.system_prompt, second.tool_names, second.last_user_text) == ("Q", (), "first")


async def test_running_out_of_script_is_an_assertion_naming_the_call() -> None:
    model = ScriptedModel(["only"])
    await model.complete(messages=[], system_prompt="", tools=[])
    with pytest.raises(ScriptExhaustedError, match=r"ran out at call 2.*'why\?'.*\['search'\]"):
        await model.complete(messages=[UserMessage("why?")], system_prompt="", tools=[SEARCH])
    assert isinstance(ScriptExhaustedError("x"), AssertionError)
    assert len(model.calls) == 2


async def test_unused_steps_fail_assert_script_consumed_and_extend_adds_steps() -> None:
    model = ScriptedModel([])
    model.extend(["x", ScriptedFailure(RuntimeError("boom"))])
    await model.complete(messages=[], system_prompt="", tools=[])
    with pytest.raises(AssertionError, match="1 unused step"):
        model.assert_script_consumed()
    with pytest.raises(RuntimeError, match="boom"):
        await model.complete(messages=[], system_prompt="", tools=[])


async def test_usage_is_estimated_at_four_characters_per_token_when_not_scripted() -> None:
    model = ScriptedModel(["12345"])
    reply = await model.complete(messages=[UserMessage("abcdefgh")], system_prompt="ab", tools=[])
    assert reply.usage == Usage(input_tokens=estimate_tokens("ababcdefgh"), output_tokens=2)
    assert reply.usage == Usage(3, 2)


async def test_a_scripted_assistant_message_is_returned_as_is() -> None:
    message = AssistantMessage("exact", usage=None)
    model = ScriptedModel([message])
    assert await model.complete(messages=[], system_prompt="", tools=[]) is message


async def test_complete_checkpoints_so_cancellation_is_honoured() -> None:
    model = ScriptedModel(["never"])
    with trio.CancelScope() as scope:
        scope.cancel()
        await model.complete(messages=[], system_prompt="", tools=[])
    assert scope.cancelled_caught
    assert model.remaining == 1


def test_script_steps_and_context_window_are_validated() -> None:
    with pytest.raises(TypeError, match="not a script step"):
        ScriptedModel([42])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="context_window"):
        ScriptedModel([], context_window=0)
