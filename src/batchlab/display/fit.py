"""Tables that fit the terminal: system names are never cut, numbers never wrapped.

A `FitTable` is rows of labelled figures (a system name, then cells). At render time it takes
the first layout whose narrowest rendering fits the console:

1. one table, names in the first column;
2. the figure columns split over 2, then 3 stacked tables, each repeating the names and the
   lead columns (the rate);
3. the same with short keys (a, b, c, ...) in place of the names and a legend below that
   gives each key's full name on a line of its own.

Each layout is tried with its headers on one line, then wrapped at spaces; units go in the
caption. Each column's width is fixed to its widest figure (or header), so rich never squeezes
a figure or a name: a layout either fits whole or the next one is tried.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass, field

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

MAX_STACKED = 3   # name layouts split the figures over at most this many tables
UNBOUNDED = 10_000   # columns: wide enough that no table is clamped while it is measured


@dataclass(slots=True)
class FitTable:
    title: str
    label: str                                   # header of the name column, e.g. "system"
    lead: Sequence[tuple[str, str]]              # (header, justify) repeated in every part
    columns: Sequence[tuple[str, str]]           # (header, justify) of the figures
    rows: Sequence[tuple[str, Sequence[str]]]    # (name, lead cells + figure cells)
    caption: str | None = None
    keyed: bool = True                           # may fall back to keys and a legend
    layouts: list = field(default_factory=list)  # (keys?, tables) chosen at each render

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        free = options.update_width(UNBOUNDED)   # measured unclamped: the true narrowest width
        n = len(self.columns)
        tries = [(False, parts) for parts in range(1, min(MAX_STACKED, max(n, 1)) + 1)]
        if self.keyed:
            tries += [(True, parts) for parts in range(1, max(n, 1) + 1)]
        tries = [(keys, parts, whole) for keys, parts in tries for whole in (True, False)]
        chosen = None
        for keys, parts, whole in tries:
            tables = self._tables(keys, parts, whole)
            if all(Measurement.get(console, free, t).minimum <= width for t in tables):
                chosen = (keys, tables)
                break
        if chosen is None:
            chosen = (self.keyed, tables)
        keys, tables = chosen
        self.layouts.append((keys, len(tables)))
        yield from tables
        if keys:
            for key, name in self._keys().items():
                # a name wider than the terminal is folded onto the next line, never cut
                yield Text(f"  {key} = {name}", overflow="fold")

    def _keys(self) -> dict[str, str]:
        names = list(dict.fromkeys(name for name, _ in self.rows if name))
        return {_key(k): name for k, name in enumerate(names)}

    def _tables(self, keys: bool, parts: int, whole: bool = True) -> list[Table]:
        """The layout: names or keys, figures in `parts` tables, headers on one line (`whole`)
        or wrapped at spaces."""
        by_name = {name: key for key, name in self._keys().items()}
        n_lead = len(self.lead)
        chunks = _chunks(list(range(len(self.columns))), parts)
        grouped = any(not name for name, _ in self.rows)   # a rule under each group of rows
        tables = []
        for k, chunk in enumerate(chunks):
            title = self.title if k == 0 else None
            t = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
                      caption=self.caption if k == len(chunks) - 1 else None, caption_justify="left")
            names = [by_name.get(name, name) if keys else name for name, _ in self.rows]
            t.add_column(self.label, no_wrap=True, width=_width([self.label], names))
            picked = [*range(n_lead), *(n_lead + i for i in chunk)]
            for j, (header, justify) in zip(picked, [*self.lead, *(self.columns[i] for i in chunk)]):
                # a fixed width: the widest figure or header word, so rich never squeezes a figure
                words = [header] if whole else header.split()
                t.add_column(header, justify=justify, width=_width(words, [c[j] for _, c in self.rows]))
            for r, (name, cells) in enumerate(self.rows):
                last = r + 1 == len(self.rows) or bool(self.rows[r + 1][0])
                shown = by_name.get(name, name) if keys else name
                t.add_row(shown, *cells[:n_lead], *(cells[n_lead + i] for i in chunk),
                          end_section=grouped and last and r + 1 < len(self.rows))
            tables.append(t)
        return tables


def _width(words: Sequence[str], cells: Sequence[str]) -> int:
    """Terminal cells of the widest word or figure."""
    return max([cell_len(w) for w in words] + [cell_len(c) for c in cells] + [1])


def _key(k: int) -> str:
    """a ... z, aa ... zz, aaa ...: a spreadsheet's column names, for any number of columns."""
    letters = string.ascii_lowercase
    name = ""
    k += 1
    while k:
        k, digit = divmod(k - 1, len(letters))
        name = letters[digit] + name
    return name


def _chunks(items: list[int], parts: int) -> list[list[int]]:
    size = -(-len(items) // parts) if items else 0
    return [items[i:i + size] for i in range(0, len(items), size)] if size else [[]]
