"""The structured forms of a command's result: JSON, CSV and Markdown.

A result is the command's record (``fields``: key → value) and its tables (key → rows, each
row a dict with the same keys in the same order). JSON is one document with schema
version ``sosext: 1``; CSV and Markdown print each table under its key (the record first,
as a key/value table). Markdown goes through tabulate; CSV through the standard library's
csv writer, which quotes what needs quoting (tabulate has no CSV form).
"""
from __future__ import annotations

import csv
import io
import json
from typing import Any

SCHEMA_VERSION = 1


def render_document(mode: str, command: str, fields: dict[str, Any], tables: dict[str, list[dict[str, Any]]],
                    text: list[str]) -> list[str]:
    if mode == "json":
        doc: dict[str, Any] = {"sosext": SCHEMA_VERSION, "command": command, **fields}
        for key, rows in tables.items():
            doc[key] = rows
        if not fields and not tables:
            doc["lines"] = text  # a command with no record or table of its own: its text
        return [json.dumps(doc, indent=2)]
    sections: list[tuple[str, list[str], list[list[Any]]]] = []
    if fields:
        sections.append(("", ["field", "value"], [[k, _cell(v)] for k, v in fields.items()]))
    for key, rows in tables.items():
        headers = list(rows[0].keys()) if rows else []
        sections.append((key, headers, [[_cell(r.get(h)) for h in headers] for r in rows]))
    if not sections:
        sections.append(("", ["line"], [[t] for t in text]))
    out: list[str] = []
    for title, headers, rows in sections:
        if out:
            out.append("")
        if title and len(sections) > 1:
            out.append(f"# {title}" if mode == "csv" else f"### {title}")
        out.extend(_csv(headers, rows) if mode == "csv" else _markdown(headers, rows))
    return out


def _cell(v: Any) -> Any:
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return "" if v is None else v


def _csv(headers: list[str], rows: list[list[Any]]) -> list[str]:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if headers:
        w.writerow(headers)
    w.writerows(rows)
    return buf.getvalue().rstrip("\n").split("\n") if buf.getvalue() else []


def _markdown(headers: list[str], rows: list[list[Any]]) -> list[str]:
    from tabulate import tabulate
    if not headers:
        return ["(no rows)"]
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True).split("\n")
