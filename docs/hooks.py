"""mkdocs hook: serve the experiments' reports and the benchmarks page from where they live.

`experiments/README.md` becomes `experiments/index.md`, `experiments/reports/**` keeps its
layout (so the reports' relative links to their figures resolve), and `benchmarks/README.md`
becomes `benchmarks.md` (with `benchmarks/figures/` as `figures/`). Nothing is copied into
docs/ by hand, so the site cannot drift from the reports.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {  # repository path -> site path
    "experiments/README.md": "experiments/index.md",
    "benchmarks/README.md": "benchmarks.md",
}


def on_files(files, config):
    pairs = dict(SOURCES)
    for path in sorted((ROOT / "experiments" / "reports").rglob("*")):
        if path.is_file() and path.suffix in (".md", ".png", ".csv"):
            rel = path.relative_to(ROOT).as_posix()
            pairs[rel] = rel
    for path in sorted((ROOT / "benchmarks" / "figures").glob("*.png")):  # benchmarks.md's
        pairs[path.relative_to(ROOT).as_posix()] = f"figures/{path.name}"
    for src, uri in pairs.items():
        files.append(File.generated(config, uri, abs_src_path=str(ROOT / src)))
    return files
