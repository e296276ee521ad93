# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The run report as one HTML page, from its Markdown: the same text, tables and diffs, and
the plot shown inline (an image next to the page in the report directory).

Only the Markdown the report writes is understood: ``#`` headings, paragraphs, ``- `` lists,
``> `` quotes, pipe tables, fenced code blocks, images, links, ``**bold**`` and ```code```.
Everything is escaped; nothing outside the report directory is referred to.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import os
import re

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 76em; margin: 1.5em auto; padding: 0 1em;
       color: #1b1b1b; line-height: 1.4; }
table { border-collapse: collapse; margin: 0.6em 0 1em; font-size: 0.92em; }
th, td { border: 1px solid #c8c8c8; padding: 0.25em 0.55em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
code, pre { font-family: ui-monospace, monospace; font-size: 0.9em; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; }
pre .add { color: #116329; } pre .del { color: #a40e26; }
blockquote { margin: 0.5em 0; padding: 0.2em 1em; border-left: 4px solid #ccc; color: #333; }
img { max-width: 100%; border: 1px solid #ddd; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.6em; }
"""

_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`([^`]+)`")
_RULE = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def escape(text):
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def _safe_src(src):
    """A relative path inside the report directory, or None."""
    if "://" in src or src.startswith(("/", "..")) or src.lower().startswith(("javascript:", "data:")):
        return None
    return src


def inline(text):
    """Escaped text with the report's inline Markdown (code, images, links, bold) as HTML."""
    parts = re.split(r"(`[^`]+`)", str(text))
    out = []
    for part in parts:
        m = _CODE.fullmatch(part)
        if m:
            out.append("<code>%s</code>" % escape(m.group(1)))
            continue
        html = escape(part)

        def image(m):
            src = _safe_src(m.group(2))
            if src is None:
                return m.group(0)
            return '<img src="%s" alt="%s">' % (src, m.group(1))

        def link(m):
            href = _safe_src(m.group(2))
            if href is None:
                return m.group(1)
            return '<a href="%s">%s</a>' % (href, m.group(1))

        html = _IMAGE.sub(image, html)
        html = _LINK.sub(link, html)
        html = _BOLD.sub(r"<strong>\1</strong>", html)
        out.append(html)
    return "".join(out)


def _cells(line):
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    if line.endswith("|"):
        line = line[:-1]
    return [c.strip() for c in line.split("|")]


def _table(rows):
    head, body = rows[0], rows[2:]
    out = [
        "<table>",
        "<thead><tr>%s</tr></thead>" % "".join("<th>%s</th>" % inline(c) for c in _cells(head)),
        "<tbody>",
    ]
    out += ["<tr>%s</tr>" % "".join("<td>%s</td>" % inline(c) for c in _cells(r)) for r in body]
    return out + ["</tbody>", "</table>"]


def _code(lines, lang):
    out = []
    for line in lines:
        cls = ""
        if lang == "diff" and line.startswith("+") and not line.startswith("+++"):
            cls = "add"
        elif lang == "diff" and line.startswith("-") and not line.startswith("---"):
            cls = "del"
        out.append('<span class="%s">%s</span>' % (cls, escape(line)) if cls else escape(line))
    return ["<pre><code>%s</code></pre>" % "\n".join(out)]


def embedded(markdown, directory):
    """``{src: data URI}`` of the PNG images the report's Markdown shows that exist in
    ``directory`` (the report's own folder), so that the HTML page alone, mailed or attached to a
    ticket, shows its plots."""
    out = {}
    for m in re.finditer(r"!\[[^\]]*\]\(([^)\s]+)\)", str(markdown)):
        src = m.group(1)
        if "/" in src or not src.endswith(".png") or src in out:
            continue
        path = os.path.join(directory, src)
        try:
            with open(path, "rb") as handle:
                out[src] = "data:image/png;base64," + base64.b64encode(handle.read()).decode("ascii")
        except OSError:
            continue
    return out


def to_html(markdown, title=None, images=None):
    """One self-contained HTML page of the report's Markdown; ``images`` (``embedded``) replaces
    each image's file name with its data."""
    lines = str(markdown).split("\n")
    body, para, i = [], [], 0
    title = title or next((ln[2:] for ln in lines if ln.startswith("# ")), "stacktune report")

    def flush():
        if para:
            body.append("<p>%s</p>" % inline(" ".join(para)))
            del para[:]

    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            flush()
            lang, block = line[3:].strip(), []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                block.append(lines[i])
                i += 1
            body += _code(block, lang)
        elif line.startswith("#"):
            flush()
            level = min(len(line) - len(line.lstrip("#")), 6)
            body.append("<h%d>%s</h%d>" % (level, inline(line[level:].strip()), level))
        elif line.startswith("|") and i + 1 < len(lines) and _RULE.match(lines[i + 1]):
            flush()
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(lines[i])
                i += 1
            body += _table(rows)
            continue
        elif line.startswith("- "):
            flush()
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append("<li>%s</li>" % inline(lines[i][2:]))
                i += 1
            body += ["<ul>"] + items + ["</ul>"]
            continue
        elif line.startswith("> "):
            flush()
            body.append("<blockquote>%s</blockquote>" % inline(line[2:]))
        elif not line.strip():
            flush()
        else:
            para.append(line)
        i += 1
    flush()
    for src, uri in (images or {}).items():
        body = [part.replace('<img src="%s"' % escape(src), '<img src="%s"' % uri) for part in body]
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            "<title>%s</title>" % escape(title),
            "<style>%s</style>" % STYLE,
            "</head>",
            "<body>",
        ]
        + body
        + ["</body>", "</html>", ""]
    )
