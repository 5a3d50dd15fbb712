"""mkdocs hook: serve the files that live outside docs/ from where they live, and make the links
that work on GitHub work in the site too.

`experiments/README.md` becomes `experiments/index.md`, `experiments/reports/**` keeps its
layout (so the reports' relative links to their figures resolve), `benchmarks/README.md`
becomes `benchmarks.md` (with `benchmarks/figures/` as `figures/`), and the repository's
`CONTRIBUTING.md` becomes `contributing.md`. Nothing is copied into docs/ by hand, so the site
cannot drift from them.

A page links a file by its path in the repository (`../experiments/README.md` from
`docs/index.md`, `docs/architecture.md` from `CONTRIBUTING.md`), which is what GitHub shows;
before mkdocs resolves the page's links, each such link to a file the site serves is rewritten
to that file's place in the site. A link that resolves to nothing the site serves is left as
written, so the strict build still reports it.
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SOURCES = {  # repository path -> site path
    "experiments/README.md": "experiments/index.md",
    "benchmarks/README.md": "benchmarks.md",
    "CONTRIBUTING.md": "contributing.md",
}
# the repository path of every generated file -> its site path (filled by on_files)
_SITE: dict[str, str] = {}
# a Markdown link or image target: ](path) or ](path#anchor), no scheme, no spaces
_LINK = re.compile(r"(\]\()([^)\s#:]+)(#[^)\s]*)?(\))")


def on_files(files, config):
    pairs = dict(SOURCES)
    for path in sorted((ROOT / "experiments" / "reports").rglob("*")):
        if path.is_file() and path.suffix in (".md", ".png", ".csv"):
            rel = path.relative_to(ROOT).as_posix()
            pairs[rel] = rel
    for path in sorted((ROOT / "benchmarks" / "figures").glob("*.png")):  # benchmarks.md's
        pairs[path.relative_to(ROOT).as_posix()] = f"figures/{path.name}"
    _SITE.clear()
    _SITE.update(pairs)
    for src, uri in pairs.items():
        files.append(File.generated(config, uri, abs_src_path=str(ROOT / src)))
    return files


def site_path(repo_path: str) -> str | None:
    """Where the site serves the file at ``repo_path`` (relative to the repository root):
    a page of docs/ at its place there, a generated file at its site path; else None."""
    if repo_path.startswith("docs/"):
        return repo_path.removeprefix("docs/")
    return _SITE.get(repo_path)


def rewrite_links(markdown: str, page_repo_path: str, page_site_path: str) -> str:
    """``markdown`` (the page at ``page_repo_path`` in the repository, served at
    ``page_site_path``) with every relative link to a file the site serves pointing to its
    place in the site."""
    page_dir = posixpath.dirname(page_repo_path)

    def fix(m: re.Match) -> str:
        target = posixpath.normpath(posixpath.join(page_dir, m[2]))
        where = None if target.startswith("..") else site_path(target)
        if where is None:
            return m[0]
        new = posixpath.relpath(where, posixpath.dirname(page_site_path) or ".")
        return f"{m[1]}{new}{m[3] or ''}{m[4]}"

    return _LINK.sub(fix, markdown)


def on_page_markdown(markdown, page, config, files):
    src = page.file.abs_src_path
    if src is None:
        return markdown
    repo_path = Path(os.path.normpath(src)).relative_to(ROOT).as_posix()
    return rewrite_links(markdown, repo_path, page.file.src_uri)
