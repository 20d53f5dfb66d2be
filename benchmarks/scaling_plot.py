"""Plot the cost per chunk and per query of search_latency runs against the index size.

Each argument is ``LABEL=PATH``: PATH holds the output of one ``benchmarks.search_latency
--json`` run (its last line is read); runs with the same label form one series. Two
panels, log-scaled chunk axis: peak RSS per chunk (KiB) and hybrid p50 per 1,000 chunks
(us). Written as a self-contained SVG (no plotting library needed):

    python -m benchmarks.scaling_plot --out benchmarks/scaling.svg \\
        after=run-10k.json after=run-100k.json before=old-100k.json
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path

PANELS = (
    ("rss_bytes_per_chunk", "peak RSS per chunk, KiB", 1 / 1024),
    ("hybrid_us_per_1k_chunks", "hybrid p50 per 1k chunks, us", 1.0),
)
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")
WIDTH, HEIGHT, PAD = 360, 260, 48


def read_runs(specs: Sequence[str]) -> dict[str, list[dict[str, float]]]:
    """``LABEL=PATH`` arguments as series of run summaries, each sorted by size."""
    series: dict[str, list[dict[str, float]]] = {}
    for spec in specs:
        label, sep, path = spec.partition("=")
        if not sep:
            raise SystemExit(f"expected LABEL=PATH, got {spec!r}")
        lines = Path(path).read_text(encoding="utf-8").strip().splitlines()
        run = json.loads(next(line for line in reversed(lines) if line.startswith("{")))
        series.setdefault(label, []).append(run)
    for runs in series.values():
        runs.sort(key=lambda r: r["chunks"])
    return series


def _panel(
    x0: int, key: str, title: str, scale: float, series: dict[str, list[dict[str, float]]]
) -> list[str]:
    points = [
        (float(r["chunks"]), float(r[key]) * scale)
        for runs in series.values()
        for r in runs
        if isinstance(r.get(key), (int, float)) and math.isfinite(float(r[key]))
    ]
    if not points:
        return []
    lx = [math.log10(x) for x, _ in points]
    top = max(y for _, y in points) * 1.1 or 1.0
    xmin, xmax = math.floor(min(lx)), math.ceil(max(lx))
    xmax = max(xmax, xmin + 1)

    def sx(x: float) -> float:
        return x0 + PAD + (math.log10(x) - xmin) / (xmax - xmin) * (WIDTH - 2 * PAD)

    def sy(y: float) -> float:
        return HEIGHT - PAD - y / top * (HEIGHT - 2 * PAD)

    out = [
        f'<text x="{x0 + WIDTH / 2}" y="20" text-anchor="middle">{title}</text>',
        f'<line x1="{x0 + PAD}" y1="{HEIGHT - PAD}" x2="{x0 + WIDTH - PAD}" '
        f'y2="{HEIGHT - PAD}" stroke="black"/>',
        f'<line x1="{x0 + PAD}" y1="{PAD}" x2="{x0 + PAD}" y2="{HEIGHT - PAD}" stroke="black"/>',
    ]
    for e in range(xmin, xmax + 1):
        x = sx(10.0**e)
        label = f"{10**e // 1000}k" if e < 6 else f"{10**e // 10**6}M"
        out.append(f'<text x="{x}" y="{HEIGHT - PAD + 16}" text-anchor="middle">{label}</text>')
    for i in range(5):
        y = top * i / 4
        out.append(f'<text x="{x0 + PAD - 4}" y="{sy(y) + 4}" text-anchor="end">{y:.3g}</text>')
    for colour, runs in zip(COLOURS, series.values(), strict=False):
        pts = [
            (sx(float(r["chunks"])), sy(float(r[key]) * scale))
            for r in runs
            if isinstance(r.get(key), (int, float)) and math.isfinite(float(r[key]))
        ]
        if len(pts) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}"/>')
        out.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>' for x, y in pts)
    return out


def render(series: dict[str, list[dict[str, float]]]) -> str:
    """The SVG document: one panel per figure, a legend below."""
    body: list[str] = []
    for i, (key, title, scale) in enumerate(PANELS):
        body.extend(_panel(i * WIDTH, key, title, scale, series))
    for j, (colour, label) in enumerate(zip(COLOURS, series, strict=False)):
        x = PAD + j * 160
        body.append(f'<rect x="{x}" y="{HEIGHT}" width="10" height="10" fill="{colour}"/>')
        body.append(f'<text x="{x + 14}" y="{HEIGHT + 9}">{label}</text>')
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * WIDTH}" height="{HEIGHT + 20}" '
        'font-family="sans-serif" font-size="11">\n' + "\n".join(body) + "\n</svg>\n"
    )


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scaling_plot")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("runs", nargs="+", help="LABEL=PATH of a search_latency --json output")
    args = p.parse_args(argv)
    args.out.write_text(render(read_runs(args.runs)), encoding="utf-8")


if __name__ == "__main__":
    main()
