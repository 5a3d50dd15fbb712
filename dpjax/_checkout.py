"""``dpjax.experiments`` in a source checkout.

The experiments live in the repository's ``experiments/`` directory and are installed as the
subpackage ``dpjax.experiments`` (``package-dir`` in pyproject.toml). An installed copy needs
nothing more. A source checkout imported from its own directory (``python -m dpjax.cli`` or
``pytest`` in the repository root, a git worktree beside an editable install of another
checkout) has no ``dpjax/experiments`` directory, so :func:`install` adds a finder that resolves
that one name to the checkout's ``experiments/`` -- always the checkout the imported ``dpjax``
comes from, never another one an editable install points at.
"""

from __future__ import annotations

import importlib.util
import os
import sys

NAME = "dpjax.experiments"


class _CheckoutFinder:
    def __init__(self, directory: str) -> None:
        self.directory = directory

    def find_spec(self, fullname, path=None, target=None):
        if fullname != NAME:
            return None
        return importlib.util.spec_from_file_location(
            fullname, os.path.join(self.directory, "__init__.py"),
            submodule_search_locations=[self.directory])


def install(package_dir: str) -> None:
    """If ``package_dir`` (the ``dpjax`` directory) sits in a dpjax source checkout, resolve
    ``dpjax.experiments`` to the checkout's ``experiments/`` directory."""
    root = os.path.dirname(os.path.abspath(package_dir))
    experiments = os.path.join(root, "experiments")
    if os.path.isdir(os.path.join(os.path.abspath(package_dir), "experiments")):
        return  # an installed copy: dpjax/experiments is a real directory
    if not os.path.isfile(os.path.join(experiments, "__init__.py")):
        return
    try:
        with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as f:
            if 'name = "dpjax"' not in f.read():
                return
    except OSError:
        return
    if not any(isinstance(f, _CheckoutFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _CheckoutFinder(experiments))
