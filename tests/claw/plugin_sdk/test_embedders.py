from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import trio

from claw.plugin_sdk import ConfigError, EmbeddingError, EmbeddingProvider, InlineWorkerPool
from claw.plugin_sdk.search import (
    HashEmbedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    embed_texts,
    embeddings_url,
    max_input_bytes_for,
    plan_pieces,
    stem,
)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


async def test_hash_embedder_is_deterministic_normalised_and_a_provider() -> None:
    e = HashEmbedder()
    assert isinstance(e, EmbeddingProvider)
    a = await e.embed(["The quick brown fox", "東京タワーに行った"])
    b = await HashEmbedder(workers=InlineWorkerPool()).embed(
        ["The quick brown fox", "東京タワーに行った"]
    )
    assert a.dtype == np.float32 and a.shape == (2, 384)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-5)


async def test_hash_embedder_captures_morphology_but_not_synonyms() -> None:
    e = HashEmbedder()
    v = await e.embed(
        ["she went running with her dogs", "he runs with his dog", "automobile", "car"]
    )
    assert _cos(v[0], v[1]) > 0.3
    assert abs(_cos(v[2], v[3])) < 0.2
    assert stem("running") == "run" and stem("dogs") == "dog"


async def test_hash_embedder_relates_cjk_text_by_shared_bigrams() -> None:
    v = await HashEmbedder().embed(["東京タワーに行った", "東京タワーは高い", "猫が好きです"])
    assert _cos(v[0], v[1]) > _cos(v[0], v[2]) + 0.2


class _SmallWindow:
    """A provider with a tiny byte limit that records what it is asked to embed."""

    id = "small"
    model = "m"
    dims = 8
    max_input_bytes = 16

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def embed(self, texts: Any) -> np.ndarray:
        self.calls.append(list(texts))
        return np.ones((len(texts), self.dims), dtype=np.float32)


async def test_oversize_inputs_are_split_by_the_byte_limit_and_batched() -> None:
    p = _SmallWindow()
    text = "alpha beta gamma delta epsilon zeta"  # 35 bytes > 16
    out = await embed_texts(p, [text, "short"], batch_size=2)
    sent = [t for call in p.calls for t in call]
    assert all(len(t.encode()) <= 16 for t in sent)
    assert "".join(sent[:-1]) == text and sent[-1] == "short"
    assert all(len(call) <= 2 for call in p.calls)
    assert out.shape == (2, 8)
    pieces, owners = plan_pieces([text, "short"], 16)
    assert owners == [0] * (len(pieces) - 1) + [1]


async def test_a_provider_returning_the_wrong_shape_is_an_embedding_error() -> None:
    class Broken(_SmallWindow):
        async def embed(self, texts: Any) -> np.ndarray:
            return np.ones((len(texts), 3), dtype=np.float32)

    with pytest.raises(EmbeddingError, match="shape"):
        await embed_texts(Broken(), ["x"], batch_size=4)


def test_sentence_transformers_byte_limit_follows_the_model_window() -> None:
    assert max_input_bytes_for(256) == 1024
    assert max_input_bytes_for(1) == 4
    with pytest.raises(ValueError, match="max_seq_length"):
        max_input_bytes_for(0)


def test_sentence_transformers_embedder_without_the_package_names_the_extra() -> None:
    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match="sentence-transformers"):
            SentenceTransformerEmbedder("/nonexistent", workers=InlineWorkerPool())
    else:
        pytest.skip("sentence-transformers is installed; this checks its absence")


# -- the OpenAI-compatible HTTP embedder against a local fake server --------------------

Handler = Callable[[dict[str, Any]], tuple[int, dict[str, Any] | None]]


async def _serve_http(
    handler: Handler, requests: list[dict[str, Any]], stream: trio.SocketStream
) -> None:
    """A minimal HTTP/1.1 server: one request per connection, then close."""
    async with stream:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            body += await stream.receive_some(65536)
        request = {"path": lines[0].split()[1], "headers": headers, "json": json.loads(body)}
        requests.append(request)
        status, payload = handler(request)
        if payload is None:
            await trio.sleep_forever()  # never answers: the client must time out
        out = json.dumps(payload).encode()
        await stream.send_all(
            f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
            f"content-length: {len(out)}\r\nconnection: close\r\n\r\n".encode()
            + out
        )


async def _start_server(
    nursery: trio.Nursery, handler: Handler
) -> tuple[str, list[dict[str, Any]]]:
    requests: list[dict[str, Any]] = []
    listeners = await nursery.start(
        functools.partial(
            trio.serve_tcp, lambda s: _serve_http(handler, requests, s), 0, host="127.0.0.1"
        )
    )
    port = listeners[0].socket.getsockname()[1]
    return f"http://127.0.0.1:{port}", requests


def _ok(request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    texts = request["json"]["input"]
    data = [{"index": i, "embedding": [float(len(t)), 1.0, 0.0]} for i, t in enumerate(texts)]
    return 200, {"data": list(reversed(data)), "model": request["json"]["model"]}


async def test_http_embedder_batches_and_orders_by_index() -> None:
    async with trio.open_nursery() as nursery:
        url, requests = await _start_server(nursery, _ok)
        e = OpenAIEmbedder(base_url=url, model="m1", dims=3, api_key="k", batch_size=2)
        out = await e.embed(["a", "bb", "ccc"])
        nursery.cancel_scope.cancel()
    assert out[:, 0].tolist() == [1.0, 2.0, 3.0]
    assert [len(r["json"]["input"]) for r in requests] == [2, 1]
    assert requests[0]["path"] == "/v1/embeddings"
    assert requests[0]["headers"]["authorization"] == "Bearer k"


async def test_http_embedder_retries_server_errors_then_succeeds() -> None:
    failures = [503, 429]

    def flaky(request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if failures:
            return failures.pop(0), {"error": "busy"}
        return _ok(request)

    async with trio.open_nursery() as nursery:
        url, requests = await _start_server(nursery, flaky)
        e = OpenAIEmbedder(base_url=url + "/v1", model="m", dims=3, backoff_base=0.0)
        out = await e.embed(["hello"])
        nursery.cancel_scope.cancel()
    assert len(requests) == 3 and out.shape == (1, 3)


async def test_http_embedder_fails_at_once_on_a_client_error() -> None:
    async with trio.open_nursery() as nursery:
        url, requests = await _start_server(nursery, lambda r: (400, {"error": "bad model"}))
        e = OpenAIEmbedder(base_url=url, model="m", dims=3, backoff_base=0.0)
        with pytest.raises(EmbeddingError, match="HTTP 400"):
            await e.embed(["x"])
        nursery.cancel_scope.cancel()
    assert len(requests) == 1


async def test_http_embedder_times_out_and_gives_up_after_its_retries() -> None:
    second = trio.Event()

    def never_answer(request: dict[str, Any]) -> tuple[int, None]:
        if len(requests) == 2:
            second.set()
        return 200, None

    async with trio.open_nursery() as nursery:
        url, requests = await _start_server(nursery, never_answer)
        e = OpenAIEmbedder(
            base_url=url, model="m", dims=3, timeout=0.05, max_retries=1, backoff_base=0.0
        )
        with pytest.raises(EmbeddingError, match="timed out"):
            await e.embed(["x"])
        # The retry may time out before the server has parsed it on a busy machine:
        # wait for the server to see it rather than race it.
        with trio.fail_after(10):
            await second.wait()
        nursery.cancel_scope.cancel()
    assert len(requests) == 2


async def test_http_embedder_rejects_a_response_of_the_wrong_width() -> None:
    async with trio.open_nursery() as nursery:
        url, _ = await _start_server(nursery, _ok)
        with pytest.raises(EmbeddingError, match="shape"):
            await OpenAIEmbedder(base_url=url, model="m", dims=5).embed(["x"])
        nursery.cancel_scope.cancel()


def test_embeddings_url_adds_v1_once() -> None:
    assert embeddings_url("http://h:1") == "http://h:1/v1/embeddings"
    assert embeddings_url("http://h:1/v1/") == "http://h:1/v1/embeddings"
