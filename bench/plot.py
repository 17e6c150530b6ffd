"""Plots and tables from chainfd-bench-gpu's JSON: Fig. 2 (time vs links, one chain), Fig. 3 (time
vs batch size, 10 and 200 links, and the 7-dof arm), and the crossover table (which back end wins
where), as PNG files and Markdown.

    python bench/plot.py bench/results/h100_bench_gpu.json --out bench/results
"""
import argparse
import json
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {
    "mujoco.1core": ("MuJoCo mj_forward, 1 core", "k", "o"),
    "mujoco.allcores": ("MuJoCo mj_forward, all cores", "gray", "s"),
    "cpu.fast": ("chainfd cpu.fast, 1 core", "tab:green", "^"),
    "cuda.abia": ("chainfd cuda.abia", "tab:blue", "D"),
    "cuda.jsiia": ("chainfd cuda.jsiia", "tab:orange", "v"),
    "cuda.cfa": ("chainfd cuda.cfa", "tab:red", "x"),
}


def series(rows, fig, model=None):
    out = {}
    for r in rows:
        if r["fig"] != fig or (model and not r["model"].startswith(model)):
            continue
        if r["us_per_batch"] <= 0:
            continue
        out.setdefault(r["backend"], []).append(r)
    return out


def plot(rows, fig, model, xkey, title, path, device):
    s = series(rows, fig, model)
    plt.figure(figsize=(7, 4.5))
    for name, pts in s.items():
        pts.sort(key=lambda r: r[xkey])
        label, color, marker = STYLE.get(name, (name, None, "."))
        plt.loglog([p[xkey] for p in pts], [p["us_per_batch"] for p in pts], marker=marker,
                   color=color, label=label)
    plt.xlabel("links n" if xkey == "n" else "independent problems B")
    plt.ylabel("time (us)" + (" per forward dynamics" if xkey == "n" else " per batch"))
    plt.title(f"{title}\n{device}", fontsize=9)
    plt.grid(True, which="both", alpha=0.3)
    plt.legend(fontsize=8)
    plt.tight_layout()
    plt.savefig(path, dpi=110)
    plt.close()


def crossover(rows):
    """For every measured (n, B): the fastest back end and the ratio to MuJoCo on all cores (or
    one core where all-core figures do not exist)."""
    cells = {}
    for r in rows:
        if r["us_per_batch"] <= 0:
            continue
        cells.setdefault((r["fig"], r["n"], r["B"]), {})[r["backend"]] = r["us_per_batch"]
    lines = ["| n | B | fastest | us per batch | FD/s | vs MuJoCo (all cores) | runner-up |",
             "| ---: | ---: | --- | ---: | ---: | ---: | --- |"]
    for (fig, n, B), t in sorted(cells.items(), key=lambda k: (k[0][1], k[0][2], k[0][0])):
        ours = {k: v for k, v in t.items() if not k.startswith("mujoco")}
        if not ours:
            continue
        best = sorted(ours.items(), key=lambda kv: kv[1])
        mj = t.get("mujoco.allcores", t.get("mujoco.1core"))
        ratio = f"x{mj / best[0][1]:.3g}" if mj else "MuJoCo cannot load n > 1023"
        runner = f"{best[1][0]} ({best[1][1]:.4g})" if len(best) > 1 else ""
        lines.append(f"| {n} | {B} | {best[0][0]} | {best[0][1]:.4g} | {B / best[0][1] * 1e6:.3g} |"
                     f" {ratio} | {runner} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    d = json.load(open(a.json))
    rows, dev = d["results"], f"{d['device']}; host {d['host_cores']} cores; MuJoCo {d['mujoco']}"
    os.makedirs(a.out, exist_ok=True)
    plot(rows, "fig2", None, "n", "Fig. 2: one chain, one forward dynamics",
         os.path.join(a.out, "fig2_links.png"), dev)
    plot(rows, "fig3", "chain:10,", "B", "Fig. 3: 10 links, B problems",
         os.path.join(a.out, "fig3_n10.png"), dev)
    plot(rows, "fig3", "chain:200,", "B", "Fig. 3: 200 links, B problems",
         os.path.join(a.out, "fig3_n200.png"), dev)
    plot(rows, "arm7", None, "B", "7-dof arm, B problems", os.path.join(a.out, "arm7_batch.png"), dev)
    table = crossover(rows)
    with open(os.path.join(a.out, "crossover.md"), "w") as f:
        f.write(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
