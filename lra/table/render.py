"""Display tables (`Section`s) rendered as Markdown (pipe tables) or LaTeX (booktabs), and tidy
summaries as CSV."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

import pandas as pd

FORMATS = ("markdown", "csv", "latex")


@dataclass
class Section:
    """One display table: a title, a subtitle saying what the table is made of (lra.table.scope), the
    table (strings) and notes printed under it."""
    title: str
    table: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    subtitle: str = ""


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "±": r"$\pm$", "×": r"$\times$", "Δ": r"$\Delta$", "–": "--", "—": "---", "−": "$-$",
                  "≤": r"$\leq$"}


def latex_escape(text) -> str:
    text = re.sub(r"(?<![\w.])-(?=\d)", "−", str(text))  # a negative number gets a real minus sign
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def render(sections: Sequence[Section], fmt: str = "markdown") -> str:
    """Display sections as Markdown (headings + pipe tables + notes) or LaTeX (booktabs tabulars)."""
    if fmt not in ("markdown", "latex"):
        raise ValueError(f"render format must be markdown or latex, got {fmt!r} (csv writes the summaries)")
    chunks = []
    for section in sections:
        if fmt == "markdown":
            chunks.append(f"## {section.title}\n")
            if section.subtitle:
                chunks.append(f"{section.subtitle}\n")
            if not section.table.empty:
                chunks.append(section.table.to_markdown(index=False, tablefmt="pipe", disable_numparse=True) + "\n")
            chunks.extend(f"- {note}" for note in section.notes)
        else:
            chunks.append(f"% {section.title}")
            if section.subtitle:
                chunks.append(f"% {section.subtitle}")
            if not section.table.empty:
                chunks.append(to_latex(section.table))
            chunks.extend(f"% {note}" for note in section.notes)
        chunks.append("")
    return "\n".join(chunks).rstrip() + "\n"


def to_latex(table: pd.DataFrame) -> str:
    """A booktabs tabular of a table of strings: text columns left, the others right."""
    escaped = table.map(latex_escape)
    escaped.columns = [latex_escape(c) for c in escaped.columns]
    align = "".join("l" if _is_text_column(table[c]) else "r" for c in table.columns)
    return escaped.style.hide(axis="index").to_latex(column_format=align, hrules=True)


def _is_text_column(column: pd.Series) -> bool:
    """A column of labels rather than numbers (its cells do not start with a digit, sign or dash)."""
    cells = [str(v) for v in column if str(v).strip()]
    return not cells or sum(bool(re.match(r"[-+−–\d]", c)) for c in cells) < len(cells) / 2


def to_csv(summary: pd.DataFrame) -> str:
    return summary.to_csv(index=False, float_format="%.6g")
