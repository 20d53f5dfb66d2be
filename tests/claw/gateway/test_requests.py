"""Requests after connect: matching by id, scopes, aborts, close, invalidation, errors."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
import trio.testing

import claw
from claw.gateway import (
    Gateway,
    GatewayAddress,
    GatewayConnectionError,
    GatewayError,
    GatewayRequestError,
    open_gateway_client,
)

from .conftest import (
    ADMIN_TOKEN,
    READ_TOKEN,
    Recorder,
    connect_raw,
    install_test_methods,
    make_gateway_config,
    open_raw,
    receive_json,
    send_json,
)


async def test_concurrent_requests_are_matched_by_id_in_completion_order(
    address: GatewayAddress, recorder: Recorder
) -> None:
    finished: list[str] = []
    results: dict[str, dict[str, Any]] = {}
    done = {"a": trio.Event(), "b": trio.Event()}

    async with open_gateway_client(address.url, READ_TOKEN) as client:

        async def ask(gate: str) -> None:
            results[gate] = await client.request("test.wait", {"gate": gate})
            finished.append(gate)
            done[gate].set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, "a")
            nursery.start_soon(ask, "b")
            await recorder.started_event("a").wait()
            await recorder.started_event("b").wait()
            recorder.gate("b").set()
            await done["b"].wait()
            assert finished == ["b"]
            recorder.gate("a").set()
    assert finished == ["b", "a"]
    assert results == {"a": {"gate": "a"}, "b": {"gate": "b"}}


async def test_responses_echo_integer_and_string_ids(address: GatewayAddress) -> None:
    async with open_raw(address) as ws:
        await connect_raw(ws)
        await send_json(ws, {"type": "req", "id": 42, "method": "test.echo", "params": {"x": 1}})
        first = await receive_json(ws)
        await send_json(ws, {"type": "req", "id": "s", "method": "test.echo"})
        second = await receive_json(ws)
    assert first == {
        "type": "res",
        "id": 42,
        "ok": True,
        "payload": {"params": {"x": 1}, "requestId": 42},
    }
    assert second["id"] == "s"
    assert second["payload"]["params"] == {}


async def test_missing_scope_is_forbidden_before_the_handler_runs(
    address: GatewayAddress, recorder: Recorder
) -> None:
    async with open_gateway_client(address.url, READ_TOKEN) as client:
        with pytest.raises(GatewayRequestError) as refused:
            await client.request("test.admin")
    assert refused.value.code == "FORBIDDEN"
    assert "operator.admin" in refused.value.message
    assert recorder.calls == []
    async with open_gateway_client(
        address.url, ADMIN_TOKEN, scopes=["operator.read", "operator.admin"]
    ) as client:
        assert await client.request("test.admin") == {"admin": True}
    assert recorder.calls == ["test.admin"]


async def test_cancel_frame_aborts_the_handler_and_its_context_is_refused_afterwards(
    host: claw.Host, address: GatewayAddress, recorder: Recorder
) -> None:
    outcome: list[GatewayRequestError] = []
    async with open_gateway_client(address.url, READ_TOKEN) as client:

        async def ask() -> None:
            with pytest.raises(GatewayRequestError) as aborted:
                await client.request("test.wait", {"gate": "g"}, request_id="r1")
            outcome.append(aborted.value)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            await recorder.started_event("g").wait()
            await client.cancel("r1")
        assert recorder.cancelled_event("g").is_set()
        assert outcome[0].code == "UNAVAILABLE"
        assert outcome[0].request_id == "r1"
        context = recorder.contexts["g"]
        with pytest.raises(GatewayError) as refused:
            context.check_current()
        assert refused.value.code == "UNAVAILABLE"
        with pytest.raises(claw.StaleCapabilityError):
            host.verify(context.caller)
        # The connection and its authority outlive one aborted request.
        host.verify(context.authority)
        assert (await client.request("test.echo", {"k": "v"}))["params"] == {"k": "v"}


async def test_an_answered_requests_context_is_revoked_but_its_connection_is_not(
    host: claw.Host, address: GatewayAddress, recorder: Recorder
) -> None:
    async with open_gateway_client(address.url, READ_TOKEN) as client:
        recorder.gate("g").set()
        assert await client.request("test.wait", {"gate": "g"}) == {"gate": "g"}
        context = recorder.contexts["g"]
        with pytest.raises(claw.StaleCapabilityError, match="gateway-request"):
            host.verify(context.caller)
        host.verify(context.authority)


async def test_cancelling_the_caller_sends_a_cancel_frame(
    address: GatewayAddress, recorder: Recorder
) -> None:
    async with open_gateway_client(address.url, READ_TOKEN) as client:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.request, "test.wait", {"gate": "g"})
                await recorder.started_event("g").wait()
                scope.cancel()
        await recorder.cancelled_event("g").wait()
        assert (await client.request("test.echo"))["params"] == {}


async def test_connection_close_cancels_in_flight_handlers_and_revokes_the_authority(
    host: claw.Host, gateway: Gateway, address: GatewayAddress, recorder: Recorder
) -> None:
    async with open_raw(address) as ws:
        await connect_raw(ws)
        wait = {"type": "req", "id": "1", "method": "test.wait", "params": {"gate": "g"}}
        await send_json(ws, wait)
        await recorder.started_event("g").wait()
        context = recorder.contexts["g"]
        host.verify(context.authority)
        assert gateway.statistics().requests_in_flight == 1
    await recorder.cancelled_event("g").wait()
    await trio.testing.wait_all_tasks_blocked()
    assert gateway.statistics().connections == ()
    with pytest.raises(claw.StaleCapabilityError):
        host.verify(context.authority)
    with pytest.raises(claw.StaleCapabilityError):
        host.verify(context.caller)
    with pytest.raises(GatewayError) as refused:
        context.check_current()
    assert refused.value.code == "UNAVAILABLE"


async def test_invalidation_refuses_new_requests_and_in_flight_ones_at_their_next_check(
    host: claw.Host, gateway: Gateway, address: GatewayAddress, recorder: Recorder
) -> None:
    async with open_gateway_client(address.url, READ_TOKEN) as client:
        connection_id = client.connection_id
        assert connection_id is not None
        outcome: list[GatewayRequestError] = []

        async def ask() -> None:
            with pytest.raises(GatewayRequestError) as refused:
                await client.request("test.wait", {"gate": "g"})
            outcome.append(refused.value)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            await recorder.started_event("g").wait()
            assert await gateway.invalidate(connection_id)
            with pytest.raises(claw.StaleCapabilityError):
                host.verify(recorder.contexts["g"].authority)
            recorder.gate("g").set()
        assert outcome[0].code == "UNAVAILABLE"
        assert "revoked" in outcome[0].message
        with pytest.raises(GatewayRequestError) as later:
            await client.request("test.echo")
        assert later.value.code == "UNAVAILABLE"
        stats = gateway.statistics().connection(connection_id)
        assert stats is not None
        assert stats.revoked
    assert not await gateway.invalidate(connection_id)


async def test_result_of_a_handler_that_skips_its_check_is_withheld_after_revocation(
    gateway: Gateway, address: GatewayAddress, recorder: Recorder
) -> None:
    async with open_gateway_client(address.url, READ_TOKEN) as client:
        assert client.connection_id is not None
        outcome: list[GatewayRequestError] = []

        async def ask() -> None:
            with pytest.raises(GatewayRequestError) as refused:
                await client.request("test.wait", {"gate": "g", "check": False})
            outcome.append(refused.value)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            await recorder.started_event("g").wait()
            await gateway.invalidate(client.connection_id)
            recorder.gate("g").set()
    assert outcome[0].code == "UNAVAILABLE"


async def test_internal_errors_hide_the_exception_text_and_log_it(
    address: GatewayAddress, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="claw.gateway")
    async with open_gateway_client(address.url, READ_TOKEN) as client:
        with pytest.raises(GatewayRequestError) as failed:
            await client.request("test.fail")
        assert failed.value.code == "INTERNAL"
        assert "secret" not in failed.value.message
        assert "/var/lib" not in failed.value.message
        # The connection survives a failing handler.
        assert (await client.request("test.echo"))["params"] == {}
    assert any("secret detail" in record.exc_text for record in caplog.records if record.exc_text)


async def test_non_mapping_payload_is_an_internal_error(address: GatewayAddress) -> None:
    async with open_gateway_client(address.url, READ_TOKEN) as client:
        with pytest.raises(GatewayRequestError) as failed:
            await client.request("test.badPayload")
    assert failed.value.code == "INTERNAL"


async def test_gateway_error_from_a_handler_is_answered_with_its_code(
    address: GatewayAddress,
) -> None:
    async with open_gateway_client(address.url, READ_TOKEN) as client:
        with pytest.raises(GatewayRequestError) as failed:
            await client.request("test.notFound")
    assert (failed.value.code, failed.value.message) == ("NOT_FOUND", "no such thing")


async def test_unknown_method_is_an_invalid_request_naming_it(address: GatewayAddress) -> None:
    async with open_gateway_client(address.url, READ_TOKEN) as client:
        with pytest.raises(GatewayRequestError) as failed:
            await client.request("memory.nope")
        assert failed.value.code == "INVALID_REQUEST"
        assert "memory.nope" in failed.value.message
        assert (await client.request("test.echo"))["params"] == {}


async def test_duplicate_in_flight_id_is_rejected_and_the_first_still_answered(
    address: GatewayAddress, recorder: Recorder
) -> None:
    async with open_raw(address) as ws:
        await connect_raw(ws)
        wait = {"type": "req", "id": "x", "method": "test.wait", "params": {"gate": "g"}}
        await send_json(ws, wait)
        await recorder.started_event("g").wait()
        await send_json(ws, {"type": "req", "id": "x", "method": "test.echo"})
        duplicate = await receive_json(ws)
        assert duplicate["id"] == "x"
        assert duplicate["error"]["code"] == "INVALID_REQUEST"
        recorder.gate("g").set()
        first = await receive_json(ws)
    assert first == {"type": "res", "id": "x", "ok": True, "payload": {"gate": "g"}}


async def test_requests_beyond_the_in_flight_limit_are_unavailable(
    host: claw.Host, nursery: trio.Nursery, recorder: Recorder
) -> None:
    gateway = Gateway(host, config=make_gateway_config(max_in_flight=2))
    install_test_methods(gateway, recorder)
    address = await nursery.start(gateway.serve)
    async with open_gateway_client(address.url, READ_TOKEN) as client:
        async with trio.open_nursery() as requests:
            requests.start_soon(client.request, "test.wait", {"gate": "a"})
            requests.start_soon(client.request, "test.wait", {"gate": "b"})
            await recorder.started_event("a").wait()
            await recorder.started_event("b").wait()
            with pytest.raises(GatewayRequestError) as refused:
                await client.request("test.echo")
            assert refused.value.code == "UNAVAILABLE"
            recorder.gate("a").set()
            recorder.gate("b").set()
        assert (await client.request("test.echo"))["params"] == {}


async def test_cancel_for_an_unknown_id_is_not_answered(address: GatewayAddress) -> None:
    async with open_raw(address) as ws:
        await connect_raw(ws)
        await send_json(ws, {"type": "cancel", "id": "nothing-here"})
        await send_json(ws, {"type": "req", "id": "e", "method": "test.echo"})
        answer = await receive_json(ws)
    assert answer["id"] == "e"
    assert answer["ok"] is True


async def test_a_second_connect_is_an_invalid_request(address: GatewayAddress) -> None:
    async with open_raw(address) as ws:
        await connect_raw(ws)
        await send_json(
            ws,
            {"type": "req", "id": "2", "method": "connect", "params": {"auth": {"token": "x"}}},
        )
        answer = await receive_json(ws)
        assert answer["error"]["code"] == "INVALID_REQUEST"
        await send_json(ws, {"type": "req", "id": "3", "method": "test.echo"})
        assert (await receive_json(ws))["ok"] is True


async def test_closing_the_client_fails_its_pending_requests(
    address: GatewayAddress, recorder: Recorder
) -> None:
    failures: list[BaseException] = []
    async with trio.open_nursery() as nursery:
        async with open_gateway_client(address.url, READ_TOKEN) as client:

            async def ask() -> None:
                try:
                    await client.request("test.wait", {"gate": "g"})
                except GatewayConnectionError as exc:
                    failures.append(exc)

            nursery.start_soon(ask)
            await recorder.started_event("g").wait()
    assert len(failures) == 1
    await recorder.cancelled_event("g").wait()


async def test_handler_context_carries_the_connection_authority(
    host: claw.Host, address: GatewayAddress, recorder: Recorder
) -> None:
    async with open_gateway_client(address.url, READ_TOKEN) as client:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.request, "test.wait", {"gate": "g"})
            await recorder.started_event("g").wait()
            context = recorder.contexts["g"]
            assert isinstance(context.authority, claw.OperatorAuthority)
            assert context.authority.scopes == {"operator.read"}
            assert context.connection_id == client.connection_id
            assert context.caller.authority is context.authority
            assert context.caller.cancel_scope is context.cancel_scope
            host.verify(context.caller)
            context.check_current()
            recorder.gate("g").set()
