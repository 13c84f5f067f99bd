"""HTML markup shared by the report page and its colour grids: escaping and a table."""

from __future__ import annotations

import html
from collections.abc import Sequence


def _html_table(table_id: str, headers: Sequence[str], rows: Sequence[str], css_class: str = "") -> str:
    head = "".join(f"<th>{_e(header)}</th>" for header in headers)
    klass = f' class="{css_class}"' if css_class else ""
    return (f'<table id="{table_id}"{klass}><thead><tr>{head}</tr></thead>\n<tbody>\n'
            + "\n".join(rows) + "\n</tbody></table>")


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)
