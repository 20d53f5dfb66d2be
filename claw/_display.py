"""Tables people can read: the HTML a notebook shows for claw's results.

A notebook renders an object through its ``_repr_html_``; a plain ``print`` gets its
ordinary repr. claw's results (search results and hits, sessions, status, events) give
both: an HTML form drawn with :func:`html_table` / :func:`html_record`, and a table form,
a list of flat ``dict`` rows (:class:`Table`), which is what ``pandas.DataFrame(...)`` or
``csv.DictWriter`` take. Nothing here imports a notebook library.
"""

from __future__ import annotations

import datetime
import html
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import attrs

MAX_CELL_CHARS = 240


def cell_text(value: object) -> str:
    """A cell's text: numbers to three decimals, ``None`` as a dash, long text cut."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.3f}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {cell_text(v)}" for k, v in value.items())
    if isinstance(value, list | tuple | frozenset | set):
        return ", ".join(cell_text(v) for v in value)
    text = " ".join(str(value).split())
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + "…"


def utc_text(seconds: float | None) -> str | None:
    """A wall-clock time (seconds since the epoch) as ``YYYY-MM-DD HH:MM:SS`` in UTC."""
    if seconds is None:
        return None
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _cell(value: object) -> str:
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    style = ' style="text-align:right"' if numeric else ' style="text-align:left"'
    return f"<td{style}>{html.escape(cell_text(value))}</td>"


def html_table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], *, caption: str | None = None
) -> str:
    """An HTML table of ``rows`` (escaped; numbers right-aligned)."""
    parts = ['<table class="claw">']
    if caption:
        parts.append(f'<caption style="text-align:left">{html.escape(caption)}</caption>')
    parts.append("<thead><tr>")
    parts.extend(f'<th style="text-align:left">{html.escape(h)}</th>' for h in headers)
    parts.append("</tr></thead><tbody>")
    for row in rows:
        parts.append("<tr>" + "".join(_cell(v) for v in row) + "</tr>")
    parts.append("</tbody></table>")
    return "".join(parts)


def html_record(title: str, fields: Mapping[str, object]) -> str:
    """One object as a two-column table of its fields, under ``title``."""
    return html_table(("field", "value"), fields.items(), caption=title)


class HasRow(Protocol):
    """An object with a table form of its own: one flat row."""

    def row(self) -> dict[str, Any]: ...


@attrs.frozen(repr=False)
class Table:
    """Rows of a result, as a list of flat ``dict`` rows with an HTML form.

    ``pandas.DataFrame(table.rows)`` (or ``list(table)``) gives a data frame; in a
    notebook the table draws itself. ``caption`` says what it is; ``notes`` follow it
    (a warning, a cursor to the next page).
    """

    rows: tuple[dict[str, Any], ...]
    caption: str | None = None
    notes: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        items: Iterable[HasRow | Mapping[str, Any]],
        *,
        caption: str | None = None,
        notes: Iterable[str] = (),
    ) -> Table:
        """A table of ``items``: mappings, or objects with a ``row()`` method."""
        rows = tuple(dict(i) if isinstance(i, Mapping) else i.row() for i in items)
        return cls(rows=rows, caption=caption, notes=tuple(n for n in notes if n))

    @property
    def columns(self) -> tuple[str, ...]:
        """Every key of the rows, in first-seen order."""
        seen: dict[str, None] = {}
        for row in self.rows:
            seen.update(dict.fromkeys(row))
        return tuple(seen)

    def without_empty_columns(self) -> Table:
        """The same table without the columns that are ``None`` in every row (a record
        type whose fields apply to some kinds only: provenance)."""
        keep = [c for c in self.columns if any(row.get(c) is not None for row in self.rows)]
        rows = tuple({c: row[c] for c in keep if c in row} for row in self.rows)
        return attrs.evolve(self, rows=rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def _repr_html_(self) -> str:
        columns = self.columns
        body = html_table(
            columns, ([row.get(c) for c in columns] for row in self.rows), caption=self.caption
        )
        notes = "".join(f"<p>{html.escape(note)}</p>" for note in self.notes)
        return body + notes

    def __repr__(self) -> str:
        return str(self)

    def __str__(self) -> str:
        columns = self.columns
        lines = ["  ".join(columns)]
        lines += ["  ".join(cell_text(row.get(c)) for c in columns) for row in self.rows]
        return "\n".join([*([self.caption] if self.caption else []), *lines, *self.notes])


def table(
    items: Iterable[HasRow | Mapping[str, Any]], *, caption: str | None = None
) -> Table:
    """A :class:`Table` of ``items`` (sessions, hits, events...): a notebook draws it."""
    return Table.of(items, caption=caption)
