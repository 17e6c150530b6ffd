"""bench/peers' GPU table: the peers' rows (peers_gpu.py's JSON) beside chainfd's (chainfd-bench-gpu
--only peers, the same models, batches and problems, run in the same session on the same machine).

    python bench/peers/table_gpu.py --chainfd A.json [B.json ...] --peers P.json [Q.json ...] --out DIR

Prints one line per peer row,
    peer=NAME model=M n=N B=B what=fd|step peer_us=X chainfd=WHO chainfd_us=Y ratio=Z
(ratio = peer_us / chainfd_us: above 1, chainfd is faster), and writes DIR/peers_gpu.md (the table,
with the precisions and what each peer's call includes) and DIR/peers_gpu_*.png (time against B).
"""
import argparse
import json
import os


def load_chainfd(paths):
    rows, device = {}, None
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        device = device or d.get("device")
        for r in d["results"]:
            if r["fig"] not in ("peers_fd", "peers_step") or r["us_per_batch"] <= 0:
                continue
            what = "fd" if r["fig"] == "peers_fd" else "step"
            rows.setdefault((r["model"], what, r["B"]), []).append(r)
    return rows, device


def chainfd_best(rows, model, what, B, gpu=True):
    """chainfd's fastest measured GPU way for (model, what, B) (gpu=False: its CPU path on one
    core, measured at B = 1, which backend=auto picks for one short chain)"""
    cands = [r for r in rows.get((model, what, B), []) if r["backend"].startswith("cuda") == gpu]
    if not cands:
        return None
    return min(cands, key=lambda r: r["us_per_batch"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chainfd", nargs="+", required=True)
    ap.add_argument("--peers", nargs="+", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    crows, cdev = load_chainfd(a.chainfd)
    p = {"rows": [], "sources": []}
    for path in a.peers:
        with open(path) as f:
            d = json.load(f)
        p["rows"] += d["rows"]
        p.setdefault("device", d.get("device"))
        # each file's own versions (one file's MuJoCo may not be another's)
        p["sources"].append((os.path.basename(path), d.get("device"), d.get("versions", {})))
    os.makedirs(a.out, exist_ok=True)
    lines, table = [], []
    for r in p["rows"]:
        if not r.get("us") or r["us"] <= 0:
            continue
        c = chainfd_best(crows, r["model"], r["what"], r["B"])
        if not c:
            print(f"peer={r['peer']} model={r['model']} n={r['n']} B={r['B']} what={r['what']} "
                  f"peer_us={r['us']:.4g} chainfd=none (not measured)")
            continue
        ratio = r["us"] / c["us_per_batch"]
        line = (f"peer={r['peer']} model={r['model']} n={r['n']} B={r['B']} what={r['what']} "
                f"peer_us={r['us']:.4g} chainfd={c['backend']} chainfd_us={c['us_per_batch']:.4g} "
                f"ratio={ratio:.3g}")
        cpu = chainfd_best(crows, r["model"], r["what"], r["B"], gpu=False)
        if cpu:
            line += f" chainfd_cpu_us={cpu['us_per_batch']:.4g}"
        print(line)
        lines.append(line)
        table.append((r, c, ratio, cpu))
    with open(os.path.join(a.out, "peers_gpu.md"), "w") as f:
        f.write(f"chainfd's run: {cdev}.\n\n")
        for name, dev, vers in p["sources"]:
            f.write(f"- {name}: {dev}; " + ", ".join(f"{k} {v}" for k, v in sorted(vers.items())) + "\n")
        f.write("\n")
        f.write("| model | n | B | what | peer | precision | peer us | chainfd (GPU, double) | chainfd us | "
                "peer / chainfd | chainfd cpu.fast, 1 core | peer's error |\n")
        f.write("| --- | ---: | ---: | --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: |\n")
        for r, c, ratio, cpu in table:
            err = r.get("err")
            err = f"{err:.1e}" if isinstance(err, (int, float)) else ""
            cpu = f"{cpu['us_per_batch']:.3g}" if cpu else ""
            f.write(f"| {r['model']} | {r['n']} | {r['B']} | {r['what']} | {r['peer']} | "
                    f"{r.get('precision', '')} | {r['us']:.4g} | {c['backend']} | {c['us_per_batch']:.4g} | "
                    f"{ratio:.3g} | {cpu} | {err} |\n")
        notes = sorted({(r["peer"], r.get("note", "")) for r, *_ in table if r.get("note")})
        if notes:
            f.write("\nWhat each peer's call includes:\n\n")
            for peer, note in notes:
                f.write(f"- {peer}: {note}\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib missing: no plots)")
        return
    models = sorted({(r["model"], r["n"]) for r, *_ in table}, key=lambda x: x[1])
    if not models:
        print("(no peer row matched one of chainfd's: no plots)")
        return
    for what in ("fd", "step"):
        fig, axes = plt.subplots(1, len(models), figsize=(4 * len(models), 3.6), squeeze=False)
        for ax, (model, n) in zip(axes[0], models):
            series = {}
            for r, *_ in table:
                if r["model"] == model and r["what"] == what:
                    series.setdefault(r["peer"], []).append((r["B"], r["us"]))
            ch = sorted({(B, cr["us_per_batch"]) for (m, w, B) in crows if m == model and w == what
                         for cr in [chainfd_best(crows, m, w, B)] if cr})
            if ch:
                ax.plot([x for x, _ in ch], [y for _, y in ch], "k-o", label="chainfd (double)")
            for peer, pts in sorted(series.items()):
                pts.sort()
                ax.plot([x for x, _ in pts], [y for _, y in pts], "--.", label=peer)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{model} (n = {n})", fontsize=9)
            ax.set_xlabel("batch B")
            ax.set_ylabel("us per batched " + ("forward" if what == "fd" else "step"))
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=6)
        fig.suptitle(f"{'forward dynamics' if what == 'fd' else 'steps'} on {p.get('device', '?')}", fontsize=10)
        fig.tight_layout()
        fig.savefig(os.path.join(a.out, f"peers_gpu_{what}.png"), dpi=110)
        plt.close(fig)


if __name__ == "__main__":
    main()
