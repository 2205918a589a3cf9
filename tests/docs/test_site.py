"""The documentation site builds with no warning (what ``make docs`` runs:
``mkdocs build --strict``), into a temporary directory, and reads well as built: the API
reference links instead of showing Sphinx roles, lists no attribute by its implementation,
every page loads its scripts, styles and code highlighting from the site itself, no link
points to ``None``, and wide tables scroll in their own box. Skips with the reason when the
``docs`` extra (mkdocs, mkdocstrings) is not installed; CI installs it."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ("reference/discovery/index.html", "reference/cdi/index.html",
             "reference/testing/index.html")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    missing = [m for m in ("mkdocs", "mkdocstrings", "mkdocstrings_handlers.python")
               if importlib.util.find_spec(m.split(".")[0]) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (pip install -e '.[docs]'; "
                    "make docs installs it)")
    out = tmp_path_factory.mktemp("site") / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    yield out


def _pages(site: Path) -> list[Path]:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 15
    return pages


def test_the_site_builds_without_warnings(site: Path) -> None:
    for page in ("index.html", "vendor-guide/index.html", "harness/index.html",
                 "go-helper/index.html", "cli/index.html", *REFERENCE):
        assert (site / page).is_file(), page
    reference = (site / "reference/testing/index.html").read_text()
    assert "watch_health" in reference and "cdi_files" in reference


def test_the_reference_links_instead_of_showing_sphinx_roles(site: Path) -> None:
    role = re.compile(r":(?:py:)?(?:attr|class|data|exc|func|meth|mod|obj|const):`")
    raw = {page: len(role.findall((site / page).read_text())) for page in REFERENCE}
    assert raw == dict.fromkeys(REFERENCE, 0)
    discovery = (site / "reference/discovery/index.html").read_text()
    # :class:`DeviceAttribute` in Device's docstring is a link to its entry
    assert re.search(r'<a class="autorefs autorefs-internal"[^>]* '
                     r'href="#drakit\.discovery\.model\.DeviceAttribute"><code>', discovery)


class _Entries(HTMLParser):
    """The reference's attribute entries: heading id → the text of its signature."""

    def __init__(self) -> None:
        super().__init__()
        self.entries: dict[str, str] = {}
        self._in_attribute = False
        self._heading: str | None = None
        self._signature: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "div" and "doc-attribute" in classes:
            self._in_attribute = True
        elif self._in_attribute and re.fullmatch(r"h\d", tag) and a.get("id"):
            self._heading = a["id"]
        elif self._heading and tag == "div" and "doc-signature" in classes:
            self._signature = []

    def handle_data(self, data: str) -> None:
        if self._signature is not None:
            self._signature.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "pre" and self._signature is not None and self._heading:
            self.entries[self._heading] = "".join(self._signature).strip()
            self._signature, self._heading, self._in_attribute = None, None, False


def test_the_reference_lists_no_attribute_by_its_implementation(site: Path) -> None:
    for page in REFERENCE:
        parser = _Entries()
        parser.feed((site / page).read_text())
        assert parser.entries, page
        private = [k for k in parser.entries if re.search(r"\._|\.model_config$", k)]
        assert private == [], page
        implementation = {k: v for k, v in parser.entries.items() if re.search(r"\bself\b", v)}
        assert implementation == {}, page


def test_the_members_of_device_attribute_are_documented(site: Path) -> None:
    parser = _Entries()
    parser.feed((site / "reference/discovery/index.html").read_text())
    members = {k.rsplit(".", 1)[1] for k in parser.entries
               if k.startswith("drakit.discovery.model.DeviceAttribute.")}
    assert members == {"int_", "bool_", "string", "version", "ints", "bools", "strings",
                       "versions"}


class _Assets(HTMLParser):
    """Every URL a page loads by itself: scripts, stylesheets, icons, images, frames."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("script", "img", "iframe") and a.get("src"):
            self.loaded.append(a["src"] or "")
        elif tag == "link" and a.get("href"):
            self.loaded.append(a["href"] or "")
        elif tag == "a" and "href" in a:
            self.links.append(a["href"] or "")


def test_every_page_loads_only_from_the_site(site: Path) -> None:
    for page in _pages(site):
        parser = _Assets()
        parser.feed(page.read_text())
        outside = [u for u in parser.loaded if re.match(r"(?i)(https?:)?//", u)]
        assert outside == [], page
    for css in site.rglob("*.css"):
        imports = re.findall(r"""(?:@import|url\()\s*['"]?((?:https?:)?//[^'")\s]+)""",
                             css.read_text())
        assert imports == [], css


def test_no_link_points_to_none(site: Path) -> None:
    for page in _pages(site):
        parser = _Assets()
        parser.feed(page.read_text())
        assert "None" not in parser.links, page
        assert "" not in parser.links, page


def test_code_is_highlighted_when_the_site_is_built(site: Path) -> None:
    guide = (site / "vendor-guide/index.html").read_text()
    blocks = re.findall(r'<div class="highlight"[^>]*><pre[^>]*>(.*?)</pre>', guide, re.S)
    assert len(blocks) > 5
    # Pygments' colours are in the page: no script has to colour the code in the browser
    assert all('<span style="color' in block for block in blocks), blocks[0][:200]
    assert "hljs" not in guide and "highlight.min.js" not in guide


def test_wide_tables_scroll_in_their_own_box(site: Path) -> None:
    for page in ("operator/index.html", "chart-values/index.html",
                 "compatibility/index.html"):
        html = (site / page).read_text()
        assert "<table>" in html, page
        sheets = [s for s in re.findall(r'<link[^>]*href="([^"]+\.css)"', html)
                  if "//" not in s]
        rules = "".join((site / page).parent.joinpath(s).resolve().read_text()
                        for s in sheets)
        tables = re.search(r"\.rst-content table\s*\{([^}]*)\}", rules)
        assert tables is not None, page
        assert "overflow-x: auto" in tables.group(1) and "max-width: 100%" in tables.group(1)
    compatibility = (site / "compatibility/index.html").read_text()
    header = re.search(r"<thead>(.*?)</thead>", compatibility, re.S)
    assert header is not None and header.group(1).count("<th") == 9
