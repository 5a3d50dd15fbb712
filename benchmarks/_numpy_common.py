"""What every plain-NumPy baseline script shares: a command line, a summary CSV and a figure.

The baselines are written the way researchers write these studies: Python loops over
repetitions and privacy levels (and iterations), the data of a repetition generated once and
shared by its levels, NumPy's default ``Generator`` and float64 unless a comment says otherwise.
They import nothing from dpjax (or jax): a user of the baseline would not pay that import.
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from pathlib import Path

import numpy as np


def summarise(errors: np.ndarray, labels: list[str]) -> list[dict]:
    """Mean and standard error of the final error per level (``errors``: (reps, L))."""
    reps = errors.shape[0]
    return [{"level": lab, "mean": float(errors[:, j].mean()),
             "se": float(errors[:, j].std(ddof=1) / math.sqrt(reps)) if reps > 1 else 0.0,
             "count": reps} for j, lab in enumerate(labels)]


def write_outputs(out: str | None, errors: np.ndarray, labels: list[str], title: str) -> None:
    """``summary.csv`` and ``figure.png`` (mean final error per level, 1 s.e. bars) in ``out``."""
    rows = summarise(errors, labels)
    if out is None:
        for r in rows:
            print(r)
        return
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.errorbar(range(len(rows)), [r["mean"] for r in rows], [r["se"] for r in rows], fmt="o")
    ax.set_xticks(range(len(rows)), labels, rotation=30)
    ax.set_ylabel("mean final error")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path / "figure.png", dpi=100)
    plt.close(fig)


def parser(doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="directory for summary.csv and figure.png")
    return p


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def eps_labels(eps_list) -> list[str]:
    return [f"eps={e:g}" for e in eps_list]


def peel(rng: np.random.Generator, v: np.ndarray, s: int, b: float) -> np.ndarray:
    """NoisyHT (peeling) as papers print it: ``s`` rounds of argmax of ``|v| + Laplace(b)``
    over the coordinates not yet chosen, then the chosen ones released with fresh noise.
    ``b = 0`` (epsilon = inf) is plain top-``s`` hard thresholding."""
    d = v.shape[0]
    absv = np.abs(v)
    selected: list[int] = []
    for _ in range(s):
        scores = absv + (rng.laplace(0.0, b, d) if b > 0 else 0.0)
        scores[selected] = -np.inf
        selected.append(int(np.argmax(scores)))
    out = np.zeros_like(v)
    out[selected] = v[selected] + (rng.laplace(0.0, b, s) if b > 0 else 0.0)
    return out
