"""Chunk vectors for a sync: the sync's own new entries first, then the cache, then the embedder.

The embedding cache lives in the store, keyed by provider, model and text hash. A sync
holds the entries it makes (:class:`CacheWrites`) and writes only those that survive the
cache's pruning, once, at its end.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Sequence

import attrs
import numpy as np
import numpy.typing as npt

from claw.plugin_sdk import EmbeddingProvider, WorkerPool
from claw.plugin_sdk.search import embed_texts, sha256_hex

from ._records import PreparedChunk
from ._store import Store

# The most bytes of vectors a sync holds back from the embedding cache (see CacheWrites).
_CACHE_WRITES_BYTES = 128 * 2**20


@attrs.define(eq=False)
class CacheWrites:
    """The embedding-cache entries a sync made and has not written yet, oldest first.

    The cache keeps its ``limit`` most recently used entries, so of a first sync of a
    million chunks only the last ``limit`` vectors survive its pruning: written batch by
    batch, the other 950,000 were inserted and deleted again (1.5 GB through SQLite).
    Held back here, only the newest ``limit`` are kept (an older one could not survive)
    and written once at the end of the sync; at most ``bound`` are held (written out
    when the limit is larger), so memory stays bounded whatever the setting. Entries a
    sync made count as used at its end.
    """

    limit: int
    bound: int
    # Whether any entry was added since the last write (a limit of 0 holds none, but
    # the write still prunes the cache to it).
    made: bool = False
    _entries: collections.OrderedDict[str, npt.NDArray[np.float32]] = attrs.field(
        factory=collections.OrderedDict
    )

    @classmethod
    def sized(cls, limit: int, dims: int) -> CacheWrites:
        """Held back for a cache of ``limit`` entries of ``dims``-dimensional vectors."""
        return cls(limit=max(0, limit), bound=max(1, _CACHE_WRITES_BYTES // max(1, 4 * dims)))

    def get(self, text_hash: str) -> npt.NDArray[np.float32] | None:
        """The held vector of ``text_hash`` (now the most recent), if any."""
        found = self._entries.get(text_hash)
        if found is not None:
            self._entries.move_to_end(text_hash)
        return found

    def add(self, entries: Iterable[tuple[str, npt.NDArray[np.float32]]]) -> bool:
        """Hold ``entries`` as the most recent; whether they are due to be written."""
        held = self._entries
        for text_hash, vector in entries:
            self.made = True
            held[text_hash] = vector
            held.move_to_end(text_hash)
            if len(held) > self.limit:
                held.popitem(last=False)
        return len(held) >= self.bound

    def take(self) -> list[tuple[str, npt.NDArray[np.float32]]]:
        """Every held entry, oldest first, no longer held."""
        out = list(self._entries.items())
        self._entries.clear()
        self.made = False
        return out


@attrs.define(eq=False)
class ChunkEmbedder:
    """Embeds a sync's chunks through the cache (``embedder`` None: lexical-only, no vectors)."""

    embedder: EmbeddingProvider | None
    store: Store
    workers: WorkerPool
    batch_size: int
    cache_limit: int
    #: How many entries the embedding cache holds (as of the last write or count).
    cache_entries: int = 0

    def writes(self) -> CacheWrites:
        """What one sync holds back for the cache."""
        return CacheWrites.sized(
            self.cache_limit, 0 if self.embedder is None else self.embedder.dims
        )

    async def count_cache(self) -> None:
        self.cache_entries = await self.workers.run_sync(self.store.cache_size)

    async def embed(
        self,
        chunks: Sequence[PreparedChunk],
        cache: CacheWrites,
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[npt.NDArray[np.float32] | None, int]:
        """Vectors for ``chunks`` (the sync's own new entries first, then the cache),
        and how many texts were embedded anew; those are added to ``cache``."""
        embedder = self.embedder
        if embedder is None:
            return None, 0
        if not chunks:
            return np.zeros((0, embedder.dims), dtype=np.float32), 0
        hashes = [c.embed_hash or sha256_hex(c.embed_text) for c in chunks]
        known = {h: v for h in dict.fromkeys(hashes) if (v := cache.get(h)) is not None}
        cached = await self.workers.run_sync(
            self.store.cached_vectors,
            embedder.id,
            embedder.model,
            embedder.dims,
            [h for h in hashes if h not in known],
        )
        cached.update(known)
        missing: dict[str, str] = {}
        for h, c in zip(hashes, chunks, strict=True):
            if h not in cached and h not in missing:
                missing[h] = c.embed_text
        if missing:
            texts = list(missing.values())
            step = max(1, self.batch_size) * 4
            parts = []
            for start in range(0, len(texts), step):
                parts.append(
                    await embed_texts(embedder, texts[start : start + step], self.batch_size)
                )
                if progress is not None:
                    progress(min(start + step, len(texts)), len(texts))
            fresh = np.concatenate(parts).astype(np.float32)
            new_entries = list(zip(missing.keys(), fresh, strict=True))
            cached.update(new_entries)
            if cache.add(new_entries):
                await self.write_cache(cache)
        return np.stack([cached[h] for h in hashes]).astype(np.float32), len(missing)

    async def write_cache(self, cache: CacheWrites) -> None:
        """Write (and prune past the limit) the embedding-cache entries ``cache`` holds."""
        embedder = self.embedder
        made = cache.made
        entries = cache.take()
        if embedder is None or not made:
            return
        await self.workers.run_sync(
            self.store.cache_vectors,
            embedder.id,
            embedder.model,
            entries,
            self.cache_limit,
        )
        self.cache_entries = await self.workers.run_sync(self.store.cache_size)
