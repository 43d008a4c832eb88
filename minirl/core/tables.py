"""A lesson's table: rows a student reads as a table, not as columns of printed text.

    minirl.table([("on-policy", 5e-4, [0.745, 0.740]), ("stale-1", 2.5e-4, [0.693, 0.656])],
                 ["run", "rate", "pass@1 by seed"], formats={"rate": ".2g"},
                 title="held-out pass@1")

In JupyterLab (and on the course's site) it is an HTML table with a caption, its first column
left-aligned and the numbers right-aligned to the same decimals; elsewhere, and in the notebook's
plain-text copy that nbval compares, the same table as aligned text. A cell holding a list (one
value per seed, say) shows its values side by side, each formatted like the column.
"""
from __future__ import annotations

import html
import numbers
from collections.abc import Sequence

__all__ = ["Table", "table"]


def cell_text(value, spec: str) -> str:
    """One cell: text as it is, a number to `spec`, a list or tuple of values side by side, None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return "  ".join(cell_text(v, spec) for v in value)
    if isinstance(value, numbers.Integral):  # bool and int: no decimals
        return str(value)
    if isinstance(value, numbers.Real):
        return format(float(value), spec)
    if hasattr(value, "item"):  # a 0-d tensor or NumPy scalar
        return cell_text(value.item(), spec)
    raise TypeError(f"table: a cell holds text, a number, a list of them or None; got {type(value).__name__}")


class Table:
    """Rows of cells under named columns; shown as HTML in Jupyter and as aligned text elsewhere.
    `digits` decimals for every float unless `formats` names a column's format spec (".2g", "+.3f")."""

    def __init__(self, rows: Sequence[Sequence], columns: Sequence[str], title: str | None = None,
                 digits: int = 3, formats: dict[str, str] | None = None):
        columns = [str(c) for c in columns]
        unknown = sorted(set(formats or {}) - set(columns))
        if unknown:
            raise ValueError(f"table: formats names {unknown}, which are not columns ({columns})")
        specs = [(formats or {}).get(c, f".{digits}f") for c in columns]
        self.columns, self.title = columns, title
        self.cells = []  # (rows, columns) of str
        for i, row in enumerate(rows):
            if len(row) != len(columns):
                raise ValueError(f"table: row {i} has {len(row)} cells for {len(columns)} columns ({columns})")
            self.cells.append([cell_text(v, s) for v, s in zip(row, specs)])

    def text(self) -> str:
        widths = [max(len(c), *(len(r[j]) for r in self.cells)) for j, c in enumerate(self.columns)]
        align = lambda j, s: s.ljust(widths[j]) if j == 0 else s.rjust(widths[j])
        lines = ["  ".join(align(j, c) for j, c in enumerate(row)).rstrip()
                 for row in [self.columns, *self.cells]]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(([self.title] if self.title else []) + lines)

    def _repr_html_(self) -> str:
        left = ' style="text-align: left"'
        row = lambda cells, tag: "<tr>" + "".join(
            f"<{tag}{left if j == 0 else ''}>{html.escape(c)}</{tag}>" for j, c in enumerate(cells)) + "</tr>"
        caption = f'<caption style="text-align: left">{html.escape(self.title)}</caption>' if self.title else ""
        body = "".join(row(r, "td") for r in self.cells)
        return f"<table>{caption}<thead>{row(self.columns, 'th')}</thead><tbody>{body}</tbody></table>"

    def __repr__(self) -> str:
        return self.text()


def table(rows: Sequence[Sequence], columns: Sequence[str], title: str | None = None, digits: int = 3,
          formats: dict[str, str] | None = None) -> None:
    """Show `Table(rows, columns, ...)`: displayed in Jupyter, printed elsewhere."""
    shown = Table(rows, columns, title, digits, formats)
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        print(shown.text())
        return
    if get_ipython() is None:
        print(shown.text())
    else:
        display(shown)
