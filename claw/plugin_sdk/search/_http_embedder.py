"""An embedding provider for OpenAI-compatible HTTP servers (``POST /v1/embeddings``).

Works with OpenAI and with local servers that speak the same wire format (vLLM,
llama.cpp, Ollama's OpenAI endpoint, text-embeddings-inference). Inputs are sent in
batches; transport errors, timeouts, 429 and 5xx responses are retried with
exponential backoff; other 4xx responses fail at once. Responses larger than
``max_response_bytes`` are refused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import attrs
import httpx
import numpy as np
import numpy.typing as npt
import trio

from ..._errors import EmbeddingError

_RETRYABLE = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


def embeddings_url(base_url: str) -> str:
    """``base_url`` with the embeddings path (``/v1`` added unless already there)."""
    base = base_url.rstrip("/")
    return f"{base}/embeddings" if base.endswith("/v1") else f"{base}/v1/embeddings"


@attrs.frozen
class OpenAIEmbedder:
    """Embeds through an OpenAI-compatible ``/v1/embeddings`` endpoint.

    ``dims`` must be the width the model returns (it is part of the index identity; a
    response of another width is an :class:`EmbeddingError`). ``dimensions`` is sent
    only when ``send_dimensions`` is set, for models that can shorten their output.
    """

    base_url: str
    model: str
    dims: int
    api_key: str | None = attrs.field(default=None, repr=False)
    id: str = "openai-compatible"
    max_input_bytes: int = 24_000
    batch_size: int = 64
    timeout: float = 30.0
    max_retries: int = 4
    backoff_base: float = 0.5
    backoff_max: float = 20.0
    max_response_bytes: int = 64 * 1024 * 1024
    send_dimensions: bool = False

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        headers = {"content-type": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        parts: list[npt.NDArray[np.float32]] = []
        async with httpx.AsyncClient(timeout=self.timeout, headers=headers) as client:
            for i in range(0, len(texts), self.batch_size):
                parts.append(await self._embed_batch(client, list(texts[i : i + self.batch_size])))
        return np.concatenate(parts, axis=0)

    async def _embed_batch(
        self, client: httpx.AsyncClient, batch: list[str]
    ) -> npt.NDArray[np.float32]:
        url = embeddings_url(self.base_url)
        body: dict[str, object] = {"model": self.model, "input": batch}
        if self.send_dimensions:
            body["dimensions"] = self.dims
        last: str = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                await trio.sleep(min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1)))
            try:
                response = await client.post(url, json=body)
            except httpx.TimeoutException:
                last = f"timed out after {self.timeout}s"
                continue
            except httpx.TransportError as exc:
                last = f"transport error: {exc!r}"
                continue
            if response.status_code in _RETRYABLE:
                last = f"HTTP {response.status_code}"
                continue
            if response.status_code != 200:
                raise EmbeddingError(
                    f"embedding server {url} refused the request: HTTP"
                    f" {response.status_code}: {response.text[:300]}"
                )
            return self._parse(url, response.content, len(batch))
        raise EmbeddingError(
            f"embedding server {url} failed after {self.max_retries + 1} attempts ({last});"
            " check that it is running and reachable"
        )

    def _parse(self, url: str, content: bytes, expected: int) -> npt.NDArray[np.float32]:
        if len(content) > self.max_response_bytes:
            raise EmbeddingError(f"embedding response from {url} is larger than allowed")
        try:
            payload = json.loads(content)
            items = sorted(payload["data"], key=lambda d: int(d.get("index", 0)))
            vectors = np.asarray([d["embedding"] for d in items], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(f"malformed embedding response from {url}: {exc}") from exc
        if vectors.shape != (expected, self.dims):
            raise EmbeddingError(
                f"embedding server {url} returned shape {vectors.shape};"
                f" expected ({expected}, {self.dims}) for model {self.model!r}"
            )
        return vectors
