"""``--plot out.png``: busbw against size, one line per implementation and collective.

Owns: the figure. Needs matplotlib (the ``bench`` extra); imported only when asked for.
"""

from __future__ import annotations

from .report import Row


def plot(rows: list[Row], path: str, title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("--plot needs matplotlib: pip install 'accord[bench]'") from None
    ops = list(dict.fromkeys(r.op for r in rows if r.nbytes))
    fig, axes = plt.subplots(1, max(len(ops), 1), figsize=(4.5 * max(len(ops), 1), 3.8), squeeze=False)
    for ax, op in zip(axes[0], ops):
        for impl in dict.fromkeys(r.impl for r in rows):
            points = sorted((r.nbytes, r.busbw_gbs) for r in rows if r.op == op and r.impl == impl)
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=impl)
        ax.set_xscale("log", base=2)
        ax.set_title(op)
        ax.set_xlabel("bytes")
        ax.set_ylabel("busbw GB/s")
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
