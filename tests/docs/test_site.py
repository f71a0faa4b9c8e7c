"""The built site renders as written: nothing loaded from outside, code highlighted at build
time, nested lists nested, no fence leaking into the text.

The site is built once per session with ``mkdocs build --strict``, as scripts/test.sh does, into
a folder of the session's own.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))

_ITEM = re.compile(r"^(?P<indent> *)(?:[-*+]|\d+[.)]) +(?P<text>\S.*)$")
_FENCE = re.compile(r"^ *(`{3,}|~{3,})")
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "wbr"}


def _name(page: Path) -> str:
    return str(page.relative_to(DOCS))


def built_page(site: Path, page: Path) -> Path:
    """Where mkdocs writes ``page`` (use_directory_urls: ``x.md`` is ``x/index.html``)."""
    relative = page.relative_to(DOCS).with_suffix("")
    if relative.name == "index":
        return site / relative.parent / "index.html"
    return site / relative / "index.html"


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-6000:]
    return folder


@dataclass(frozen=True)
class ListPart:
    """A list item, or a paragraph of one after its first, as the page's source writes it."""

    line: int
    words: str
    """Its first words, as they read once rendered."""
    nested: bool
    """An item written under another item: it must render in a list inside an item."""
    paragraph: bool = False
    """A later paragraph of an item, not an item: it must render inside the item."""


def list_parts(page: Path) -> Iterator[ListPart]:
    """The items of the lists of ``page`` and their later paragraphs, outside fences and comments.

    An item indented under an item is meant nested, and a paragraph indented after a blank line
    in a list is meant part of the item, whatever their indent: Python-Markdown takes them so
    only at four spaces or more (two render flat, or as a paragraph after the list that swallows
    the next item).
    """
    lines = page.read_text(encoding="utf-8").splitlines()
    fence: str | None = None
    in_comment = in_list = after_blank = False
    for number, line in enumerate(lines, start=1):
        opening = _FENCE.match(line)
        blank = not line.strip()
        if fence is not None:
            if opening and line.strip() == opening[1] and opening[1].startswith(fence):
                fence = None
        elif opening:
            fence = opening[1]
        elif in_comment or line.lstrip().startswith("<!--"):
            in_comment = "-->" not in line
        elif item := _ITEM.match(line):
            # a list opens after a blank line (or at the top), never inside a paragraph
            in_list = in_list or (not item["indent"] and (after_blank or number == 1))
            if in_list:
                yield ListPart(number, _words(item["text"]), nested=bool(item["indent"]))
        elif not blank and not line.startswith(" "):
            in_list = False
        elif in_list and after_blank and not blank and not line.lstrip().startswith("|"):
            yield ListPart(number, _words(line), nested=False, paragraph=True)
        after_blank = blank


def _words(markdown: str, count: int = 4) -> str:
    """The first words of a line of Markdown as they read once rendered, ``_squashed``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    return " ".join(_squashed(text).split()[:count])


def _squashed(text: str) -> str:
    """``text`` without the characters Markdown may take for emphasis or code."""
    return re.sub(r"[*_`]", "", text)


@dataclass
class Rendered(HTMLParser):
    """What a test reads of a page: scripts and stylesheets, code blocks, nested items' text."""

    loaded: list[str] = field(default_factory=list)
    code_blocks: list[tuple[bool, bool]] = field(default_factory=list)
    """(inside a Pygments ``div.highlight``, has token spans) for each ``<pre>``."""
    item_texts: list[str] = field(default_factory=list)
    nested_texts: list[str] = field(default_factory=list)
    text_outside_code: list[str] = field(default_factory=list)
    _stack: list[tuple[str, str]] = field(default_factory=list)
    _open_items: list[list[str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(convert_charrefs=True)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "script" and values.get("src"):
            self.loaded.append(values["src"] or "")
        if tag == "link":
            self.loaded.append(values.get("href") or "")
        if tag in _VOID:
            return
        if tag == "pre":
            highlighted = any(t == "div" and "highlight" in c.split() for t, c in self._stack)
            self.code_blocks.append((highlighted, False))
        if tag == "span" and self._inside("pre") and values.get("class"):
            highlighted, _ = self.code_blocks[-1]
            self.code_blocks[-1] = (highlighted, True)
        if tag == "li":
            self._open_items.append([])
        self._stack.append((tag, values.get("class") or ""))

    def handle_endtag(self, tag: str) -> None:
        if all(opened != tag for opened, _ in self._stack):
            return
        while self._stack:
            opened, _ = self._stack.pop()
            if opened == "li":
                text = " ".join("".join(self._open_items.pop()).split())
                self.item_texts.append(text)
                if any(t == "li" for t, _ in self._stack):
                    self.nested_texts.append(text)
            if opened == tag:
                break

    def handle_data(self, data: str) -> None:
        for texts in self._open_items:
            texts.append(data)
        if not self._inside("pre") and not self._inside("code"):
            self.text_outside_code.append(data)

    def _inside(self, tag: str) -> bool:
        return any(opened == tag for opened, _ in self._stack)


def rendered(site: Path, page: Path) -> Rendered:
    parser = Rendered()
    parser.feed(built_page(site, page).read_text(encoding="utf-8"))
    parser.close()
    return parser


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_a_page_loads_no_script_and_no_stylesheet_from_outside(site: Path, page: Path) -> None:
    loaded = rendered(site, page).loaded

    assert loaded, "the page's own scripts and stylesheets should be read"
    assert [url for url in loaded if re.match(r"(?i)^(https?:)?//", url)] == []


def test_the_pages_load_the_pygments_stylesheet_the_site_ships(site: Path) -> None:
    home = rendered(site, DOCS / "index.md")

    assert "css/pygments.css" in home.loaded
    assert ".highlight .k " in (site / "css" / "pygments.css").read_text(encoding="utf-8")


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_code_block_is_highlighted_at_build_time(site: Path, page: Path) -> None:
    blocks = rendered(site, page).code_blocks
    source = page.read_text(encoding="utf-8")

    assert all(highlighted for highlighted, _ in blocks)
    if re.search(r"^ *```(python|bash|console|toml|yaml)\b", source, re.MULTILINE):
        assert any(tokens for _, tokens in blocks), "a block of a language carries Pygments spans"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_each_list_renders_as_written_nested_lists_nested(site: Path, page: Path) -> None:
    shown = rendered(site, page)
    items = [_squashed(text) for text in shown.item_texts]
    nested = [_squashed(text) for text in shown.nested_texts]

    def as_written(part: ListPart) -> bool:
        if part.paragraph:  # inside its item
            return any(part.words in text for text in items)
        return any(text.startswith(part.words) for text in (nested if part.nested else items))

    astray = [(part.line, part.words) for part in list_parts(page) if not as_written(part)]

    assert astray == [], f"{_name(page)}: these render out of their item (indent them by 4)"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_no_fence_leaks_into_the_text(site: Path, page: Path) -> None:
    text = "".join(rendered(site, page).text_outside_code)
    code = built_page(site, page).read_text(encoding="utf-8")

    assert "```" not in text
    assert "~~~" not in text
    assert "```" not in code, "a fence closed with text after it swallowed what follows"


NESTED_PAGE = """\
# A page

- an item:
  - indented by two, meant nested
- another:
    - indented by four

  a second paragraph of the item

```markdown
- not a list:
  - in a fence
```

<!--
- nor in a comment
  - here
-->
1. A step:
   - three spaces

   | a table | in the step |
   |---|---|

A paragraph whose line wraps at
500. is no list
"""


def test_the_items_and_their_paragraphs_are_found_outside_fences_and_comments(
    tmp_path: Path,
) -> None:
    page = tmp_path / "page.md"
    page.write_text(NESTED_PAGE)

    assert [(part.line, part.words, part.nested, part.paragraph) for part in list_parts(page)] == [
        (3, "an item:", False, False),
        (4, "indented by two, meant", True, False),
        (5, "another:", False, False),
        (6, "indented by four", True, False),
        (8, "a second paragraph of", False, True),
        (19, "A step:", False, False),
        (20, "three spaces", True, False),
    ]


CHROMIUM = shutil.which("chromium") or "chromium"
"""Debian's package (scripts/test.sh installs it); missing, the browser test fails."""
PROBE = """
<script>
  // after load, once the theme's script has put each table in its scrolling frame
  window.addEventListener("load", () => setTimeout(() => {
    const frame = document.querySelector(".wy-table-responsive");
    const text = document.createRange();
    text.selectNodeContents(document.querySelector("table"));
    const keyword = document.querySelector(".highlight .kn");
    const plain = document.querySelector(".highlight code");
    document.body.dataset.probe = JSON.stringify({
      framed: frame !== null,
      textRight: text.getBoundingClientRect().right,
      frameRight: frame && frame.getBoundingClientRect().right,
      keyword: keyword && getComputedStyle(keyword).color,
      plain: plain && getComputedStyle(plain).color,
    });
  }, 100));
</script>
"""


@pytest.mark.browser
def test_in_a_browser_offline_the_home_page_s_table_fits_and_code_is_coloured(
    site: Path,
) -> None:
    # the home page with a probe that measures it once its stylesheets are in
    probed = site / "probed.html"
    home = (site / "index.html").read_text(encoding="utf-8")
    probed.write_text(home.replace("</body>", PROBE + "</body>"), encoding="utf-8")

    shown = subprocess.run(
        [
            *("timeout", "-s", "KILL", "90", CHROMIUM, "--headless", "--no-sandbox"),
            *("--disable-gpu", "--disable-background-networking", "--disable-component-update"),
            *("--disable-sync", "--no-first-run", f"--user-data-dir={site.parent / 'chromium'}"),
            "--host-resolver-rules=MAP * ~NOTFOUND",  # offline: no host resolves
            "--window-size=1280,1600",
            "--virtual-time-budget=5000",  # the page's timers run before the dump
            "--dump-dom",
            probed.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert shown.returncode == 0, shown.stderr[-3000:]
    found = re.search(r'data-probe="([^"]*)"', shown.stdout)
    assert found is not None, shown.stdout[-3000:]
    probe = json.loads(html.unescape(found[1]))
    assert probe["framed"], "the theme's script framed the table"
    assert probe["textRight"] <= probe["frameRight"] + 1, "the Where to start table is cut"
    assert probe["keyword"] is not None, "Pygments marked the keywords up"
    assert probe["keyword"] != probe["plain"], "Pygments colours a keyword"
