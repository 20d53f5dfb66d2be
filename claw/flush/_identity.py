"""The deterministic flush id and the detached session a flush runs in.

The flush id is derived from the source session's incarnation (session id and lifecycle
revision) and its pre-compaction compaction count. The count advances after each
completed compaction, so model fallbacks and retries within one compaction cycle share
an id, while the next cycle, a new session id, or a reset that keeps the id (a new
revision) each get a different one. Providers may combine it with their mutation's
identity to deduplicate retries; it grants no authority.
"""

from __future__ import annotations

import hashlib

FLUSH_SESSION_PREFIX = "memory-flush:"


def derive_flush_id(session_id: str, lifecycle_revision: int, compaction_count: int | None) -> str:
    """The flush id of one compaction cycle of one session incarnation (count ``None`` is 0)."""
    count = compaction_count or 0
    material = f"claw-flush-v1\x1f{session_id}\x1f{lifecycle_revision}\x1f{count}"
    return "flush-" + hashlib.sha256(material.encode()).hexdigest()[:32]


def flush_session_key(source_session_key: str) -> str:
    """The detached internal session key a flush of ``source_session_key`` runs under.

    It never has a session row: it is not listed with sessions, its transcript is kept
    apart from the source's (under the flush id as its session id), and its audience is
    the source's, delegated and bound to the absence of a row for this key.
    """
    return FLUSH_SESSION_PREFIX + source_session_key
