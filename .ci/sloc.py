"""Line counts of dpjax/ + experiments/ Python at a git revision: raw lines, and code lines
(no blank lines, comments or docstrings). Used for the size criterion of issue 12.

    python .ci/sloc.py [REV] [--filing-scope]

``--filing-scope`` leaves out the modules added after the one-engine issue was filed (the
paper-002 and paper-001 families and their experiments, the audits, the discrete samplers,
tuning, the CPU sampler and the worked example), so the count compares like with like.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize

LATER = (r"dp_gem|ldp_sparse|robust_mean|local_randomizers|audit\.py|discrete_noise|tune\.py"
         r"|_cpu_prng|examples/|gem_|ldp_|_gem_common|_ldp_common|models/sparse_lr")


def counts(rev: str, exclude: str | None = None) -> tuple[int, int, int]:
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev], check=True,
                           capture_output=True, text=True).stdout.split()
    names = [f for f in names if f.endswith(".py") and f.startswith(("dpjax/", "experiments/"))
             and not (exclude and re.search(exclude, f))]
    raw = code = 0
    for name in names:
        src = subprocess.run(["git", "show", f"{rev}:{name}"], check=True, capture_output=True,
                             text=True).stdout
        raw += src.count("\n")
        docs = set()
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef,
                                 ast.ClassDef)) and node.body:
                first = node.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                        and isinstance(first.value.value, str):
                    docs.update(range(first.lineno, first.end_lineno + 1))
        lines = set()
        skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                tokenize.DEDENT, tokenize.ENDMARKER)
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type not in skip:
                lines.update(ln for ln in range(tok.start[0], tok.end[0] + 1) if ln not in docs)
        code += len(lines)
    return len(names), raw, code


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--filing-scope"]
    rev = args[0] if args else "HEAD"
    files, raw, code = counts(rev, LATER if "--filing-scope" in sys.argv else None)
    print(f"{rev}: {files} files, {raw} raw lines, {code} code lines")
