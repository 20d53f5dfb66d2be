"""The memory-file writer: appends, rewrites, the matched-entry rule, undo, recovery."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from claw.memory_files import (
    BadRevisionError,
    ForgetScopeError,
    MemoryFileBusyError,
    MemoryFileChangedError,
    MemoryFileError,
    MemoryFileWriter,
    MemoryPathError,
    Placement,
    RemovalNotFoundError,
    StaleReferenceError,
    entry_spans,
    lines_revision,
)
from claw.memory_files import _writer as writer_module

from ..._processes import reap

BY = {"kind": "operator", "connectionId": "test"}
NOTE = """# Notes

## Decisions
- [2026-10-02 09:00:00 UTC] The deploy window is Friday 14:00-16:00.
- [2026-11-05 09:00:00 UTC] On-call rotates fortnightly.
  It used to rotate weekly.

## People
- Bob is the release manager.
"""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "memory").mkdir()
    (tmp_path / "MEMORY.md").write_text(NOTE, encoding="utf-8")
    return tmp_path


def _text(ws: Path, name: str = "MEMORY.md") -> str:
    return (ws / name).read_text(encoding="utf-8")


def test_entries_are_items_with_what_is_nested_headings_and_paragraphs() -> None:
    lines = [
        "# Title",  # 1 heading
        "",
        "Some prose",  # 3 paragraph
        "that goes on.",
        "- item one",  # 5 item with a continuation and a sub-item
        "  continued",
        "  - sub",
        "",
        "  after a blank, still nested",
        "- item two",  # 10
        "```",  # 11 a fence opens a paragraph entry, its lines are its own
        "- not an item",
        "```",
    ]
    assert entry_spans(lines) == [(1, 1), (3, 4), (5, 9), (10, 10), (11, 13)]


def test_an_append_is_one_write_with_a_separator_and_reports_its_lines(ws: Path) -> None:
    (ws / "memory" / "n.md").write_text("# Day\n- first", encoding="utf-8")
    writer = MemoryFileWriter(ws)
    done = writer.append("memory/n.md", "- second\n  more", by=BY)
    assert _text(ws, "memory/n.md") == "# Day\n- first\n- second\n  more\n"
    assert (done.start_line, done.end_line) == (3, 4)
    assert done.revision == lines_revision(["- second", "  more"])
    record = writer.journal.records()[-1]
    assert (record["op"], record["start"], record["by"]) == ("add", 3, BY)
    assert record["entries"] == [done.revision]


def test_an_insert_lands_before_the_line_it_names(ws: Path) -> None:
    writer = MemoryFileWriter(ws)
    done = writer.place("MEMORY.md", lambda text: Placement(text="- new entry\n", before=6), by=BY)
    lines = _text(ws).splitlines()
    assert lines[6] == "- new entry" and (done.start_line, done.end_line) == (7, 7)
    assert lines[7] == ""  # what was line 7 follows


@pytest.mark.parametrize(
    "path",
    ["../x.md", "/etc/passwd", ".claw/memory-writes/journal.jsonl", "a/./b.md", "x\\y.md", ""],
)
def test_paths_outside_the_workspace_or_into_claws_own_directory_are_refused(
    ws: Path, path: str
) -> None:
    with pytest.raises(MemoryPathError):
        MemoryFileWriter(ws).append(path, "x", by=BY)


def test_a_symlink_is_never_followed(ws: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    outside = tmp_path_factory.mktemp("outside")
    (ws / "memory" / "link").symlink_to(outside)
    with pytest.raises(MemoryPathError, match="symlink"):
        MemoryFileWriter(ws).append("memory/link/a.md", "x", by=BY)
    assert list(outside.iterdir()) == []


def test_a_file_that_is_not_utf8_can_be_appended_to_but_not_rewritten(ws: Path) -> None:
    (ws / "memory" / "bin.md").write_bytes(b"\xff\xfe\n")
    writer = MemoryFileWriter(ws)
    writer.append("memory/bin.md", "- ok", by=BY)
    with pytest.raises(MemoryFileError, match="not UTF-8"):
        writer.place("memory/bin.md", lambda t: Placement("- x", before=0), by=BY)
    assert (ws / "memory" / "bin.md").read_bytes() == b"\xff\xfe\n- ok\n"


# -- forget: the matched-entry rule ---------------------------------------------------


def test_a_citation_inside_one_entry_forgets_that_whole_entry(ws: Path) -> None:
    writer = MemoryFileWriter(ws)
    gone = writer.remove("MEMORY.md", 6, 6, by=BY)  # the continuation line of an item
    assert (gone.start_line, gone.end_line, gone.entries) == (5, 6, 1)
    assert "fortnightly" not in _text(ws) and "weekly" not in _text(ws)
    assert "deploy window" in _text(ws)


def test_a_citation_of_several_entries_is_refused_naming_them_and_removes_nothing(
    ws: Path,
) -> None:
    with pytest.raises(ForgetScopeError, match=r"covers 6 entries .*L4-L4 .*deploy window"):
        MemoryFileWriter(ws).remove("MEMORY.md", 1, 9, by=BY)
    assert _text(ws) == NOTE


def test_whole_range_removes_exactly_the_cited_lines(ws: Path) -> None:
    writer = MemoryFileWriter(ws)
    gone = writer.remove("MEMORY.md", 3, 6, by=BY, whole_range=True)
    assert gone.text == "".join(NOTE.splitlines(keepends=True)[2:6])
    assert _text(ws) == "".join(NOTE.splitlines(keepends=True)[:2] + NOTE.splitlines(True)[6:])


def test_a_dry_run_changes_nothing_and_journals_nothing(ws: Path) -> None:
    writer = MemoryFileWriter(ws)
    gone = writer.remove("MEMORY.md", 4, 4, by=BY, dry_run=True)
    assert gone.dry_run and gone.removal_id is None and "deploy" in gone.text
    assert _text(ws) == NOTE and writer.journal.records() == []


# -- forget: revisions -------------------------------------------------------------------


def test_cited_lines_that_moved_are_found_and_changed_ones_are_refused_naming_them(
    ws: Path,
) -> None:
    writer = MemoryFileWriter(ws)
    line = NOTE.splitlines()[8]
    revision = lines_revision([line])[:12]
    writer.place("MEMORY.md", lambda t: Placement("- inserted above\n", before=0), by=BY)
    moved = writer.remove("MEMORY.md", 9, 9, by=BY, revision=revision, dry_run=True)
    assert (moved.start_line, moved.moved_from) == (10, (9, 9))
    (ws / "MEMORY.md").write_text(_text(ws).replace("Bob", "Robert"), encoding="utf-8")
    with pytest.raises(StaleReferenceError, match=r"lines 9-9 changed since .*'## People'"):
        writer.remove("MEMORY.md", 9, 9, by=BY, revision=revision)
    with pytest.raises(StaleReferenceError, match="Robert"):
        writer.remove("MEMORY.md", 10, 10, by=BY, revision=revision)
    assert "Robert" in _text(ws)


def test_the_whole_files_hash_is_a_revision_too_and_a_bad_revision_is_named(ws: Path) -> None:
    import hashlib

    writer = MemoryFileWriter(ws)
    file_rev = hashlib.sha256(NOTE.encode()).hexdigest()
    assert writer.remove("MEMORY.md", 9, 9, by=BY, revision=file_rev, dry_run=True).entries == 1
    with pytest.raises(BadRevisionError, match="not a revision"):
        writer.remove("MEMORY.md", 9, 9, by=BY, revision="xyz")


# -- restore -----------------------------------------------------------------------------


def test_restore_into_an_unchanged_file_puts_the_lines_back_exactly(ws: Path) -> None:
    writer = MemoryFileWriter(ws)
    gone = writer.remove("MEMORY.md", 5, 6, by=BY)
    assert gone.removal_id is not None
    back = writer.restore(gone.removal_id, by=BY)
    assert (back.mode, back.start_line, back.end_line) == ("in-place", 5, 6)
    assert _text(ws) == NOTE
    again = writer.restore(gone.removal_id[:8], by=BY)
    assert again.already and _text(ws) == NOTE  # a retried restore does not repeat


def test_restore_after_other_changes_finds_the_gap_by_its_context(ws: Path) -> None:
    writer = MemoryFileWriter(ws)
    gone = writer.remove("MEMORY.md", 9, 9, by=BY)
    writer.append("MEMORY.md", "- Carol owns the budget.", by=BY)
    writer.place("MEMORY.md", lambda t: Placement("- first of all\n", before=0), by=BY)
    assert gone.removal_id is not None
    back = writer.restore(gone.removal_id, by=BY)
    assert back.mode == "in-place"
    assert _text(ws) == "- first of all\n" + NOTE + "- Carol owns the budget.\n"


def test_restore_where_the_place_is_ambiguous_appends_under_a_marked_heading(ws: Path) -> None:
    writer = MemoryFileWriter(ws)
    gone = writer.remove("MEMORY.md", 4, 4, by=BY)
    # The lines around the gap were edited: where it was is no longer known.
    edited = _text(ws).replace("## Decisions\n", "## Choices\n")
    (ws / "MEMORY.md").write_text(edited, encoding="utf-8")
    assert gone.removal_id is not None
    back = writer.restore(gone.removal_id, by=BY)
    assert back.mode == "appended"
    text = _text(ws)
    assert text.startswith(edited)  # nothing that was there is overwritten
    tail = text[len(edited) :].splitlines()
    assert tail[1].startswith("## Restored by claw (forgotten ")
    assert tail[3] == NOTE.splitlines()[3]
    assert (back.start_line, back.end_line) == (len(text.splitlines()),) * 2


def test_restore_of_lines_already_back_writes_nothing(ws: Path) -> None:
    writer = MemoryFileWriter(ws)
    gone = writer.remove("MEMORY.md", 9, 9, by=BY)
    (ws / "MEMORY.md").write_text(NOTE, encoding="utf-8")  # put back by hand
    assert gone.removal_id is not None
    assert writer.restore(gone.removal_id, by=BY).mode == "present"
    assert _text(ws) == NOTE


def test_removals_list_newest_first_with_their_status(ws: Path) -> None:
    writer = MemoryFileWriter(ws)
    first = writer.remove("MEMORY.md", 9, 9, by=BY)
    second = writer.remove("MEMORY.md", 4, 4, by=BY)
    assert first.removal_id is not None
    writer.restore(first.removal_id, by=BY)
    listed = writer.removals()
    assert [(r.id, r.status) for r in listed] == [
        (second.removal_id, "forgotten"),
        (first.removal_id, "restored"),
    ]
    assert listed[0].text is not None and "deploy" in listed[0].text
    assert listed[0].by is not None and listed[0].by.connection_id == "test"


def test_an_unknown_or_ambiguous_removal_id_is_a_clear_error(ws: Path) -> None:
    writer = MemoryFileWriter(ws)
    with pytest.raises(RemovalNotFoundError, match="no removal"):
        writer.restore("abcdef123456", by=BY)
    with pytest.raises(RemovalNotFoundError, match="at least 6"):
        writer.restore("ab", by=BY)


# -- changes from outside ---------------------------------------------------------------


def test_an_editors_change_between_the_read_and_the_rename_is_never_overwritten(
    ws: Path,
) -> None:
    writer = MemoryFileWriter(ws, attempts=3)
    calls = 0

    def compose(text: str) -> Placement:
        nonlocal calls
        calls += 1
        # An editor saves a changed line while claw prepares its rewrite, every time.
        edited = text.replace("release manager", f"release manager ({calls})")
        (ws / "MEMORY.md").write_text(edited, encoding="utf-8")
        return Placement("- from claw\n", before=0)

    with pytest.raises(MemoryFileChangedError, match="kept changing"):
        writer.place("MEMORY.md", compose, by=BY)
    assert _text(ws) == NOTE.replace("release manager", "release manager (3) (2) (1)")
    assert [p.name for p in ws.iterdir() if p.name.endswith(".claw-tmp")] == []


def test_a_rewrite_retries_from_the_editors_version(ws: Path) -> None:
    writer = MemoryFileWriter(ws)
    calls = 0

    def compose(text: str) -> Placement:
        nonlocal calls
        calls += 1
        if calls == 1:
            edited = text.replace("Bob", "Robert")
            (ws / "MEMORY.md").write_text(edited, encoding="utf-8")
        return Placement("- from claw\n", before=0)

    writer.place("MEMORY.md", compose, by=BY)
    assert calls == 2
    assert _text(ws) == "- from claw\n" + NOTE.replace("Bob", "Robert")


def test_lines_appended_at_the_moment_of_the_rename_are_carried_over(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exchange = writer_module._exchange

    def racing(a: Path, b: Path) -> bool:
        with b.open("a", encoding="utf-8") as f:  # echo >> MEMORY.md, in that very moment
            f.write("- appended by a script\n")
        return exchange(a, b)

    monkeypatch.setattr(writer_module, "_exchange", racing)
    MemoryFileWriter(ws).place("MEMORY.md", lambda t: Placement("- top\n", before=0), by=BY)
    assert _text(ws) == "- top\n" + NOTE + "- appended by a script\n"


def test_a_file_replaced_at_the_moment_of_the_rename_is_put_back_and_the_rewrite_redone(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exchange = writer_module._exchange
    calls = 0

    def racing(a: Path, b: Path) -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:  # an editor's atomic save lands in that very moment
            saved = b.with_name(".editor-save")
            saved.write_text(NOTE.replace("Bob", "Robert"), encoding="utf-8")
            saved.replace(b)
        return exchange(a, b)

    monkeypatch.setattr(writer_module, "_exchange", racing)
    MemoryFileWriter(ws).place("MEMORY.md", lambda t: Placement("- top\n", before=0), by=BY)
    assert _text(ws) == "- top\n" + NOTE.replace("Bob", "Robert")


# -- recovery after a kill --------------------------------------------------------------


def _pending(ws: Path, op: dict[str, Any]) -> None:
    home = ws / ".claw" / "memory-writes"
    home.mkdir(parents=True, exist_ok=True)
    (home / "pending.json").write_text(json.dumps(op), encoding="utf-8")


def test_an_append_torn_by_a_kill_is_cut_back_and_a_complete_one_gets_its_record(
    ws: Path,
) -> None:
    note = ws / "memory" / "n.md"
    note.write_text("- kept\n", encoding="utf-8")
    entry = b"- a long entry that the kill tore\n"
    with note.open("ab") as f:
        f.write(entry[:10])
    _pending(
        ws,
        {
            "op": "append",
            "path": "memory/n.md",
            "offset": 7,
            "data": base64.b64encode(entry).decode(),
        },
    )
    writer = MemoryFileWriter(ws)
    writer.recover()
    assert note.read_text(encoding="utf-8") == "- kept\n"
    record = {"id": "abc123abc123", "op": "add", "path": "memory/n.md", "by": BY, "entries": []}
    with note.open("ab") as f:
        f.write(entry)
    _pending(
        ws,
        {
            "op": "append",
            "path": "memory/n.md",
            "offset": 7,
            "data": base64.b64encode(entry).decode(),
            "record": record,
        },
    )
    writer.recover()
    assert note.read_bytes() == b"- kept\n" + entry
    assert writer.journal.records()[-1] == record
    assert not (writer.home / "pending.json").exists()


# A child that appends an entry while an editor's ``echo >>`` lands between the writer's
# size read and its write (so the entry lands after the editor's line), and is killed
# after the write, before the journal has the entry.
_KILLED_APPEND = """
import os, signal, sys
from pathlib import Path
from claw.memory_files import MemoryFileWriter
from claw.memory_files import _journal as j
from claw.memory_files import _writer as w

ws = Path(sys.argv[1])
set_pending = w.MemoryFileWriter._set_pending

def pending(self, op):
    set_pending(self, op)
    if op.get("op") == "append":
        with open(ws / "MEMORY.md", "a", encoding="utf-8") as f:
            f.write("- appended by an editor\\n")

def journalled(self, record, *, sync):
    os.kill(os.getpid(), signal.SIGKILL)

w.MemoryFileWriter._set_pending = pending
j.Journal.append = journalled
MemoryFileWriter(ws).append("MEMORY.md", "- the new entry", by={"kind": "operator"})
"""


def test_an_append_that_landed_after_an_editors_line_is_journalled_after_a_kill(
    ws: Path,
) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_APPEND, str(ws)])
    try:
        assert proc.wait(timeout=60) == -9
    finally:
        reap(proc)
    writer = MemoryFileWriter(ws)
    writer.recover()
    text = NOTE + "- appended by an editor\n- the new entry\n"
    assert _text(ws) == text
    (added,) = [r for r in writer.journal.records() if r["op"] == "add"]
    line = text.splitlines().index("- the new entry") + 1
    assert (added["start"], added["end"]) == (line, line)


def test_a_forget_killed_before_its_rename_is_void_and_its_temporary_file_removed(
    ws: Path,
) -> None:
    writer = MemoryFileWriter(ws)
    forget = {
        "id": "f00df00df00d",
        "op": "forget",
        "path": "MEMORY.md",
        "start": 9,
        "end": 9,
        "text": "- Bob is the release manager.\n",
        "at": 1.0,
        "by": BY,
    }
    writer.home.mkdir(parents=True)
    writer.journal.append(forget, sync=True)
    tmp = ws / ".MEMORY.md.0123456789ab.claw-tmp"
    tmp.write_text("half", encoding="utf-8")
    import hashlib

    old = hashlib.sha256(NOTE.encode()).hexdigest()
    _pending(
        ws,
        {
            "op": "rewrite",
            "path": "MEMORY.md",
            "tmp": tmp.name,
            "old": old,
            "new": "x",
            "record": forget["id"],
        },
    )
    writer.recover()
    assert not tmp.exists()
    assert writer.removals() == []  # never happened, so nothing to restore
    assert writer.journal.records()[-1]["op"] == "void"


# A child process that forgets "Bob is the release manager." and is killed (SIGKILL,
# by itself, so at an exact point) at the moment ``at`` names; an editor's
# ``echo >> MEMORY.md`` lands first, after the forget read the file.
_KILLED_FORGET = """
import os, signal, sys
from pathlib import Path
from claw.memory_files import MemoryFileWriter
from claw.memory_files import _writer as w

ws, at = Path(sys.argv[1]), sys.argv[2]

def editor(path):
    with open(path, "a", encoding="utf-8") as f:
        f.write("- appended by an editor\\n")

if at == "before the rename":
    def recheck(self, target, tmp, seen):
        editor(target)
        os.kill(os.getpid(), signal.SIGKILL)
    w.MemoryFileWriter._recheck = recheck
elif at == "after the rename":  # the editor writing to the file it displaced
    def settled(self, target, tmp, seen, new, pending):
        editor(tmp)
        os.kill(os.getpid(), signal.SIGKILL)
    w.MemoryFileWriter._settle_displaced = settled
elif at in ("after carrying the tail", "after keeping the displaced file"):
    # The editor writes to the file the rename displaced, the writer carries that line
    # over, and the kill comes before it keeps the displaced file, or just after.
    settle = w.MemoryFileWriter._settle_displaced
    keep = w.MemoryFileWriter._keep_displaced
    def settled(self, target, tmp, seen, new, pending):
        editor(tmp)
        kept = settle(self, target, tmp, seen, new, pending)
        if at == "after carrying the tail":
            os.kill(os.getpid(), signal.SIGKILL)
        return kept
    def kept(self, tmp, vpath, settled):
        keep(self, tmp, vpath, settled)
        os.kill(os.getpid(), signal.SIGKILL)
    w.MemoryFileWriter._settle_displaced = settled
    w.MemoryFileWriter._keep_displaced = kept
elif at == "after the re-check carried":  # the line is in the temporary file too
    recheck = w.MemoryFileWriter._recheck
    def carried(self, target, tmp, seen):
        editor(target)
        seen = recheck(self, target, tmp, seen)
        os.kill(os.getpid(), signal.SIGKILL)
    w.MemoryFileWriter._recheck = carried
elif at.startswith("undone"):
    # At the moment of the rename an editor saves the file (a new inode, as vim does),
    # so the rename is undone; in the instant our file was in place, another editor
    # appended a line to it. The kill comes right after the undo, or after that line
    # was given to the file put back.
    exchange = w._exchange
    calls = []
    def exchanged(a, b):
        calls.append(b)
        if len(calls) == 1:
            saved = b.with_name("saved-by-an-editor")
            text = b.read_text(encoding="utf-8") + "- saved by an editor\\n"
            saved.write_text(text, encoding="utf-8")
            os.replace(saved, b)
            done = exchange(a, b)
            editor(b)
            return done
        if at == "undone, before the undo":
            os.kill(os.getpid(), signal.SIGKILL)
        done = exchange(a, b)
        if at == "undone, before carrying back":
            os.kill(os.getpid(), signal.SIGKILL)
        return done
    keep = w.MemoryFileWriter._keep_displaced
    def kept(self, tmp, vpath, settled):
        keep(self, tmp, vpath, settled)
        os.kill(os.getpid(), signal.SIGKILL)
    w._exchange = exchanged
    if at == "undone, after carrying back":
        w.MemoryFileWriter._keep_displaced = kept
else:  # a line carried over by the re-check, then one in the new file, then the kill
    recheck = w.MemoryFileWriter._recheck
    def carried(self, target, tmp, seen):
        editor(target)
        return recheck(self, target, tmp, seen)
    def settled(self, target, tmp, seen, new, pending):
        with open(target, "a", encoding="utf-8") as f:
            f.write("- appended after the rename\\n")
        os.kill(os.getpid(), signal.SIGKILL)
    w.MemoryFileWriter._recheck = carried
    w.MemoryFileWriter._settle_displaced = settled
MemoryFileWriter(ws).remove("MEMORY.md", 9, 9, by={"kind": "operator", "connectionId": "t"})
"""


def _kill_a_forget(ws: Path, at: str) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_FORGET, str(ws), at])
    try:
        assert proc.wait(timeout=60) == -9
    finally:
        reap(proc)


def _after_a_killed_forget(ws: Path, at: str) -> MemoryFileWriter:
    """Kill a forget at ``at``, then let the next writers settle it: recovery, then an
    append elsewhere (a writer first carries displaced files' late bytes over). No
    temporary file is left either way."""
    _kill_a_forget(ws, at)
    writer = MemoryFileWriter(ws)
    writer.recover()
    writer.append("memory/n.md", "- next", by=BY)
    assert not list(ws.glob(".*.claw-tmp"))
    return writer


def test_a_forget_killed_before_its_rename_after_an_editor_appended_is_void(ws: Path) -> None:
    _kill_a_forget(ws, "before the rename")
    writer = MemoryFileWriter(ws)
    writer.recover()
    # The forget never happened: its lines and the editor's are in the file, and the
    # journal no longer counts it as a removal (it had it, with the file's hash
    # changed by the editor's line).
    assert _text(ws) == NOTE + "- appended by an editor\n"
    assert writer.removals() == []
    assert writer.journal.records()[-1]["op"] == "void"
    assert not list(ws.glob(".*.claw-tmp"))


def test_a_forget_killed_just_after_its_rename_stands_and_keeps_the_editors_late_line(
    ws: Path,
) -> None:
    writer = _after_a_killed_forget(ws, "after the rename")
    assert "release manager" not in _text(ws)
    assert _text(ws).endswith("- appended by an editor\n")
    assert _text(ws).count("appended by an editor") == 1
    assert [r.text for r in writer.removals()] == ["- Bob is the release manager.\n"]


def test_lines_the_recheck_carried_are_not_carried_again_after_a_kill(ws: Path) -> None:
    _after_a_killed_forget(ws, "carried by the re-check")
    text = _text(ws)
    assert "release manager" not in text
    assert text.count("- appended by an editor\n") == 1
    assert text.count("- appended after the rename\n") == 1


@pytest.mark.parametrize("at", ["after carrying the tail", "after keeping the displaced file"])
def test_a_line_carried_from_the_displaced_file_is_not_carried_again_after_a_kill(
    ws: Path, at: str
) -> None:
    writer = _after_a_killed_forget(ws, at)
    text = _text(ws)
    assert "release manager" not in text
    assert text.count("- appended by an editor\n") == 1
    assert [r.text for r in writer.removals()] == ["- Bob is the release manager.\n"]


@pytest.mark.parametrize(
    "at", ["undone, before the undo", "undone, before carrying back", "undone, after carrying back"]
)
def test_a_line_written_to_a_rename_that_was_undone_is_kept_once_after_a_kill(
    ws: Path, at: str
) -> None:
    writer = _after_a_killed_forget(ws, at)
    # The editor's save stands (the forget never happened), with the other editor's
    # line, once.
    assert _text(ws) == NOTE + "- saved by an editor\n- appended by an editor\n"
    assert writer.removals() == []


def test_a_line_the_recheck_carried_is_kept_once_when_the_kill_follows_at_once(
    ws: Path,
) -> None:
    writer = _after_a_killed_forget(ws, "after the re-check carried")
    # The forget never happened; the editor's line is there once.
    assert _text(ws) == NOTE + "- appended by an editor\n"
    assert writer.removals() == []


# A child process whose writer, settling what displaced files hold before its own
# append, is killed (SIGKILL, by itself) right after it carried a late line over.
_KILLED_STRAGGLER_CARRY = """
import os, signal, sys
from pathlib import Path
from claw.memory_files import MemoryFileWriter
from claw.memory_files import _writer as w

ws = Path(sys.argv[1])
append_bytes = w.MemoryFileWriter._append_bytes

def appended(self, target, data):
    append_bytes(self, target, data)
    if target.name == "MEMORY.md":
        os.kill(os.getpid(), signal.SIGKILL)

w.MemoryFileWriter._append_bytes = appended
MemoryFileWriter(ws).append("memory/n.md", "- next", by={"kind": "operator"})
"""


def test_a_late_line_carried_from_a_displaced_file_is_not_carried_twice_after_a_kill(
    ws: Path,
) -> None:
    writer = MemoryFileWriter(ws)
    writer.remove("MEMORY.md", 9, 9, by=BY)  # the rename displaces the old file
    (displaced,) = (writer.home / writer_module.DISPLACED_DIR).iterdir()
    # An editor that opened the old file before the rename writes to it after.
    with displaced.open("a", encoding="utf-8") as f:
        f.write("- appended by an editor, late\n")
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_STRAGGLER_CARRY, str(ws)])
    try:
        assert proc.wait(timeout=60) == -9
    finally:
        reap(proc)
    assert _text(ws).count("- appended by an editor, late\n") == 1  # carried, then killed
    writer = MemoryFileWriter(ws)
    writer.recover()
    writer.append("memory/n.md", "- again", by=BY)
    assert _text(ws).count("- appended by an editor, late\n") == 1
    assert "release manager" not in _text(ws)


_KILLED_WHILE_UPDATING_PENDING = """
import os, signal, sys
from pathlib import Path
from claw.memory_files import MemoryFileWriter
from claw.memory_files import _writer as w

ws = Path(sys.argv[1])
set_pending, recheck, write_all = (
    w.MemoryFileWriter._set_pending, w.MemoryFileWriter._recheck, w.write_all
)
calls = []

def rechecked(self, target, tmp, seen):
    with open(target, "a", encoding="utf-8") as f:  # an editor, during the rewrite
        f.write("- appended by an editor meanwhile\\n")
    return recheck(self, target, tmp, seen)

def torn(fd, data):
    write_all(fd, data[: len(data) // 2])
    os.kill(os.getpid(), signal.SIGKILL)

def pending(self, op):
    calls.append(op)
    if len(calls) == 2:  # the update after the re-check (the forget is journalled)
        w.write_all = torn
    set_pending(self, op)

w.MemoryFileWriter._recheck = rechecked
w.MemoryFileWriter._set_pending = pending
MemoryFileWriter(ws).remove("MEMORY.md", 9, 9, by={"kind": "operator"})
"""


def test_a_forget_killed_while_it_updates_its_pending_record_is_voided_not_left_live(
    ws: Path,
) -> None:
    """A rewrite updates its pending record after it journalled (here: the line an
    editor appended during it, carried into the new file by the re-check). A kill in
    that update must leave the record recovery needs: the rename never happened, so
    the forget is voided and its line stays; a torn record made recovery take the op
    for one that never began, and the journal kept a live forget of a line still in
    the file (seen once in a few hundred runs of the kill suite)."""
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WHILE_UPDATING_PENDING, str(ws)])
    try:
        assert proc.wait(timeout=60) == -9
    finally:
        reap(proc)
    writer = MemoryFileWriter(ws)
    records = writer.journal.records()
    assert [r["op"] for r in records] == ["forget"]  # journalled, then killed
    writer.recover()
    assert "release manager" in _text(ws)  # the rename never happened
    assert _text(ws).count("- appended by an editor meanwhile\n") == 1
    assert writer_module.live(writer.journal.records()) == []  # the forget is voided
    assert not [p for p in ws.iterdir() if p.name.endswith(".claw-tmp")]


def test_a_torn_journal_line_is_cut_off(ws: Path) -> None:
    writer = MemoryFileWriter(ws)
    writer.append("MEMORY.md", "- one", by=BY)
    with writer.journal.path.open("ab") as f:
        f.write(b'{"id":"torn","op":"add"')
    writer.append("MEMORY.md", "- two", by=BY)
    assert [r["op"] for r in writer.journal.records()] == ["add", "add"]


# -- the workspace's lock -------------------------------------------------------------


HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def test_another_process_holding_the_workspace_lock_excludes_a_writer_until_it_lets_go(
    ws: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The lock lives with the workspace: a writer reaching it through another path (a
    symlink, as a second state directory's configuration might) takes the same lock."""
    writer = MemoryFileWriter(ws, lock_timeout=0.2)
    writer.home.mkdir(parents=True)
    alias = tmp_path_factory.mktemp("elsewhere") / "ws-link"
    alias.symlink_to(ws)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(alias / ".claw" / "memory-writes" / "LOCK")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(MemoryFileBusyError, match="held"):
            writer.append("MEMORY.md", "- waits", by=BY)
        assert _text(ws) == NOTE
    finally:
        reap(holder)
    writer.append("MEMORY.md", "- now", by=BY)
    assert _text(ws).endswith("- now\n")


def test_the_lock_is_an_flock_on_a_file_in_the_workspace(ws: Path) -> None:
    writer = MemoryFileWriter(ws)
    with writer.exclusive():
        fd = os.open(ws / ".claw" / "memory-writes" / "LOCK", os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)


def test_lines_appended_while_a_rewrite_is_prepared_are_kept_without_starting_over(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``echo >>`` while claw writes its temporary file: the re-check finds only an
    append, so the appended lines join the new file and the rewrite goes on."""
    calls = 0

    def compose(text: str) -> Placement:
        nonlocal calls
        calls += 1
        with (ws / "MEMORY.md").open("a", encoding="utf-8") as f:
            f.write(f"- appended by a script {calls}\n")
        return Placement("- top\n", before=0)

    MemoryFileWriter(ws, attempts=1).place("MEMORY.md", compose, by=BY)
    assert calls == 1
    assert _text(ws) == "- top\n" + NOTE + "- appended by a script 1\n"


def test_late_bytes_written_to_the_displaced_file_are_carried_over_by_the_next_writer(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script that opened the file before claw's rename writes after it, into the old
    file: the next writer finds those bytes in the kept copy and appends them."""
    exchange = writer_module._exchange
    late: list[Any] = []

    def racing(a: Path, b: Path) -> bool:
        late.append(b.open("a", encoding="utf-8"))  # opened before the rename...
        return exchange(a, b)

    monkeypatch.setattr(writer_module, "_exchange", racing)
    writer = MemoryFileWriter(ws)
    writer.place("MEMORY.md", lambda t: Placement("- top\n", before=0), by=BY)
    late[0].write("- written late\n")  # ...written after it
    late[0].close()
    assert "written late" not in _text(ws)
    writer.append("MEMORY.md", "- next", by=BY)
    assert _text(ws) == "- top\n" + NOTE + "- written late\n- next\n"
    monkeypatch.setattr(writer_module, "DISPLACED_GRACE", 0.0)
    writer.recover()
    assert list((writer.home / "displaced").iterdir()) == []
