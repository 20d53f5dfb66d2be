"""Every notebook in notebooks/ runs headless, top to bottom, and shows what is committed.

The notebooks are committed with their outputs, so a reader on a code host sees the
tables and plots. Those outputs are produced by this test: it executes each notebook
in a fresh kernel and compares what every cell showed with the committed outputs.

* What is compared is what must not drift: every cell's text, HTML and stdout, after
  :func:`normalise` has masked what differs between runs and machines (temporary
  paths, dates and times, epoch seconds, session ids, memory addresses); and, for
  pictures, only that the cell still draws one (a PNG's bytes depend on the matplotlib
  and freetype versions, which a clean clone does not pin). stderr is neither compared
  nor kept.
* A cell that raises fails the test, whatever was committed.
* ``CLAW_UPDATE_NOTEBOOKS=1`` (``make notebooks``) writes the executed notebook back
  instead; cells whose normalised outputs did not change keep their committed outputs
  byte for byte, so a regeneration changes only what changed.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
UPDATE = os.environ.get("CLAW_UPDATE_NOTEBOOKS") == "1"
PICTURES = ("image/png", "image/svg+xml", "image/jpeg")

_MASKS = [
    (re.compile(r"/tmp/[^\s'\"<>,)\]]*"), "<tmp>"),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (
        re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?: ?UTC|[+-]\d{2}:\d{2})?"),
        "<time>",
    ),
    (re.compile(r"\d{4}-\d{2}-\d{2}"), "<date>"),
    (re.compile(r"0x[0-9a-f]{6,}"), "<addr>"),
    (re.compile(r"\b1[6-9]\d{8}(?:\.\d+)?\b"), "<epoch>"),  # seconds since 1970, 2020-2033
]


def normalise(text: str) -> str:
    """``text`` with what differs between runs and machines masked."""
    for pattern, mask in _MASKS:
        text = pattern.sub(mask, text)
    return text


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def shown(cell: Any) -> list[tuple[str, str]]:
    """What a code cell showed, as comparable (kind, normalised text) pairs."""
    out: list[tuple[str, str]] = []
    for output in cell.get("outputs", []):
        kind = output.get("output_type")
        if kind == "stream":
            if output.get("name") == "stdout":
                out.append(("stdout", normalise(_text(output.get("text", "")))))
        elif kind in ("execute_result", "display_data"):
            data = output.get("data", {})
            for mime in sorted(data):
                if mime in PICTURES:
                    out.append((mime, "<picture>"))
                elif mime in ("text/plain", "text/html"):
                    out.append((mime, normalise(_text(data[mime]))))
        elif kind == "error":
            out.append(("error", output.get("ename", "")))
    return out


def _without_stderr(cell: Any) -> None:
    cell["outputs"] = [
        o
        for o in cell.get("outputs", [])
        if not (o.get("output_type") == "stream" and o.get("name") == "stderr")
    ]


def test_the_notebooks_are_found() -> None:
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03"]


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_shows_its_committed_outputs(path: Path, tmp_path: Path) -> None:
    """A cell error fails the test (``CellExecutionError``) with the cell and traceback.

    The kernel is the ``python3`` kernel of the interpreter running the tests (jupyter's
    native kernel spec), so no kernel needs registering on a fresh machine.
    """
    committed = nbformat.read(path, as_version=4)
    executed = copy.deepcopy(committed)
    for cell in executed.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    client = NotebookClient(
        executed,
        timeout=300,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    code = [(old, new) for old, new in zip(committed.cells, executed.cells, strict=True)]
    code = [(old, new) for old, new in code if new.cell_type == "code"]
    errors = [name for _, new in code for kind, name in shown(new) if kind == "error"]
    assert errors == []
    if UPDATE:
        for old, new in code:
            _without_stderr(new)
            if shown(old) == shown(new):
                new.outputs = old.outputs  # unchanged: keep the committed bytes
        nbformat.write(executed, path)
        return
    for number, (old, new) in enumerate(code, 1):
        assert shown(new) == shown(old), (
            f"{path.name}, code cell {number}: its outputs differ from the committed ones; "
            "run `make notebooks` and commit the result if the change is meant"
        )
