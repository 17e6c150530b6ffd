"""Numerical check of a parallel backward sweep for one long chain: the experiment behind the scan
ABA (kernels/aba_scan.h, cpu/abia_scan_cpu.c, cuda/abia_scan.cu), which builds each block's map link
by link (a Kalman update in information form) rather than from M0 as below; same maps.

The ABA's backward sweep carries the articulated inertia P from the tip to the base, one link at a
time. Over a block of links the map from the inertia handed into the block to the one it hands on
is a Riccati map,

    F(P) = P0 + Phi (P^-1 + G)^-1 Phi^T      ((P^-1 + G)^-1 = P (1 + G P)^-1 for singular P),

with 6x6 P0, Phi, G from the block alone: in the frame of the block's base, with M0 the block's
joint-space inertia (tip free), W its screws and B0 its base coupling (columns IC_k S_k),
P0 = J_tot - B0 M0^-1 B0^T, H = B0 M0^-1 W, G = W^T M0^-1 W, Phi = (1 - H) T^T (T: base frame to
the block's last link). Such maps compose into maps of the same form, so a scan over blocks gives
every block's incoming inertia in log(blocks) steps, where CFA's elimination loses its accuracy
past about 2000 links (README, Accuracy). This script measures the base's articulated inertia of a
random chain three ways against a long-double sequential sweep: the sequential sweep in double,
the block maps applied one after another, and the block maps composed as a balanced tree (the
order of a parallel scan); on chains with random hinge axes and on planar ones.

    .deps/venv/bin/python bench/riccati_blocks.py [N ...]     (default 1024 4096 16384)

It then checks the element that carries the bias force as well (below, bias_forces).
"""
import sys

import numpy as np

BLOCK = 32


def skew(v):
    return np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]], dtype=v.dtype)


def rotation(axis, q):
    K = skew(axis)
    return np.eye(3) + np.sin(q) * K + (1 - np.cos(q)) * K @ K


def motion_transform(E, r):
    """Parent-to-child motion transform: child origin at r (parent frame), E parent-to-child."""
    X = np.zeros((6, 6))
    X[:3, :3] = E
    X[3:, 3:] = E
    X[3:, :3] = -E @ skew(r)
    return X


def random_chain(n, rng, planar):
    """Hinges through each link's origin with random offsets, masses and inertias; random axes, or
    all along z with the offsets in the plane (planar: the far links' inertia reaches the base
    undiminished, where with random axes it fades within a few blocks)."""
    links = []
    for _ in range(n):
        axis = np.array([0.0, 0.0, 1.0]) if planar else rng.normal(size=3)
        axis /= np.linalg.norm(axis)
        r = rng.uniform(0.05, 0.3) * rng.normal(size=3)
        m = rng.uniform(0.05, 2.0)
        c = rng.uniform(-0.1, 0.1, size=3)
        if planar:
            r[2] = c[2] = 0
        A = rng.normal(size=(3, 3))
        Ic = A @ A.T * 0.01 * m + np.eye(3) * 1e-4
        cx = skew(c)
        inertia = np.block([[Ic + m * cx @ cx.T, m * cx], [m * cx.T, m * np.eye(3)]])
        X = motion_transform(rotation(axis, rng.uniform(-3.1, 3.1)).T, r)
        links.append((X, np.concatenate([axis, np.zeros(3)]), inertia, 0.01))
    return links


def sequential(links, dtype):
    """The articulated inertia handed to the base, link by link, in dtype."""
    P = np.zeros((6, 6), dtype=dtype)
    for X, S, inertia, armature in reversed(links):
        X, S = X.astype(dtype), S.astype(dtype)
        IA = inertia.astype(dtype) + P
        U = IA @ S
        IA = IA - np.outer(U, U) / (S @ U + dtype(armature))
        P = X.T @ IA @ X
    return P


def block_map(block):
    """(P0, Phi, G) of a block: the map from the inertia handed to its last link to the one it
    hands to its base, everything in the base's frame."""
    T, Tc = [], np.eye(6)
    for X, _, _, _ in block:
        Tc = X @ Tc
        T.append(Tc.copy())
    S = [np.linalg.solve(T[k], block[k][1]) for k in range(len(block))]
    J = [T[k].T @ block[k][2] @ T[k] for k in range(len(block))]
    IC = [sum(J[k:]) for k in range(len(block))]
    M0 = np.array([[S[i] @ IC[max(i, j)] @ S[j] for j in range(len(block))] for i in range(len(block))])
    M0 += np.diag([b[3] for b in block])
    W = np.array(S)
    B0 = np.array([IC[k] @ S[k] for k in range(len(block))]).T
    Mi = np.linalg.inv(M0)
    H = B0 @ Mi @ W
    return sum(J) - B0 @ Mi @ B0.T, (np.eye(6) - H) @ T[-1].T, T[-1] @ (W.T @ Mi @ W) @ T[-1].T


def apply(F, P):
    P0, Phi, G = F
    return P0 + Phi @ P @ np.linalg.inv(np.eye(6) + G @ P) @ Phi.T


def compose(F1, F2):
    """F1 after F2, as one map of the same form."""
    P01, Phi1, G1 = F1
    P02, Phi2, G2 = F2
    A = np.linalg.inv(np.eye(6) + P02 @ G1)
    return (P01 + Phi1 @ P02 @ np.linalg.inv(np.eye(6) + G1 @ P02) @ Phi1.T, Phi1 @ A @ Phi2,
            G2 + Phi2.T @ G1 @ A @ Phi2)


def tree(maps):
    while len(maps) > 1:
        maps = [compose(maps[i], maps[i + 1]) if i + 1 < len(maps) else maps[i]
                for i in range(0, len(maps), 2)]
    return maps[0]


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [1024, 4096, 16384]
    rng = np.random.default_rng(7)
    print("base articulated inertia against a long-double sequential sweep, max |error| / max |P|")
    for n, planar in [(n, p) for p in (False, True) for n in sizes]:
        links = random_chain(n, rng, planar)
        ref = sequential(links, np.longdouble)
        maps = [block_map(links[s:s + BLOCK]) for s in range(0, n, BLOCK)]
        serial = np.zeros((6, 6))
        for F in reversed(maps):
            serial = apply(F, serial)
        size = float(np.abs(ref).max())

        def err(P):
            return float(np.abs(P.astype(np.longdouble) - ref).max()) / size

        # how much the far half of the chain still weighs at the base
        near = np.zeros((6, 6))
        for F in reversed(maps[:len(maps) // 2]):
            near = apply(F, near)
        print(f"{'planar' if planar else '3d':6s} n={n:6d} max|P| {size:8.3g}  far half's weight "
              f"{float(np.abs(near - serial).max()) / size:.1e}  sequential double "
              f"{err(sequential(links, np.float64)):.1e}  block maps in turn {err(serial):.1e}  "
              f"as a tree {err(apply(tree(maps), np.zeros((6, 6)))):.1e}")

    bias_forces(sizes, rng)


# ---- the bias force in the same element (the next step for the scan ABA: one scan fewer) ----------
#
# Given the inertia C and bias force t handed into a block, the block hands on
#     C' = P0 + Phi (1 + C G)^-1 C Phi^T,    t' = p0 + Phi (1 + C G)^-1 (t + C eta)
# with two more block constants, p0 (t' for C = t = 0) and eta. Such elements compose like the
# elements of the parallel Kalman filter (Sarkka and Garcia-Fernandez, 2021); F1 after F2:
#     A = (1 + P02 G1)^-1, B = (1 + G1 P02)^-1
#     P0 = P01 + Phi1 A P02 Phi1^T,  Phi = Phi1 A Phi2,  G = G2 + Phi2^T B G1 Phi2,
#     p0 = p01 + Phi1 A (p02 + P02 eta1),  eta = eta2 + Phi2^T B (eta1 - G1 p02).
# A block's element is built link by link from the tip (link i: J, S, d, pose X, rigid-body bias pb,
# velocity-product acceleration c, joint force tau), with Q0 = J + P0, U0 = Q0 S,
# D0 = S^T U0 + d, g = Phi^T S, h = pb + p0 + Q0 c:
#     eta += Phi^T (c - S (S^T h - tau) / D0),  p0 = X^T (h - U0 (S^T h - tau) / D0),
#     G += g g^T / D0,  Phi = X^T (Phi - U0 g^T / D0),  P0 = X^T (Q0 - U0 U0^T / D0) X.
# Checked here against the sequential sweeps on chains where every fourth link is massless (a block
# never ends after one) and every third has no armature.

def chain_with_bias(n, rng):
    links = []
    for i in range(n):
        A = rng.normal(size=(6, 6))
        J = A @ A.T + 0.05 * np.eye(6) if i % 4 else np.zeros((6, 6))
        axis = rng.normal(size=3)
        X = motion_transform(rotation(axis / np.linalg.norm(axis), rng.uniform(-3, 3)).T,
                             0.3 * rng.normal(size=3))
        links.append(dict(J=J, S=rng.normal(size=6), d=0.0 if i % 3 == 0 else rng.uniform(0, 0.05),
                          X=X, pb=rng.normal(size=6), c=rng.normal(size=6), tau=rng.normal()))
    return links


def sweep_with_bias(links):
    C, t = np.zeros((6, 6)), np.zeros(6)
    for L in reversed(links):
        Q, q = L["J"] + C, L["pb"] + t
        U = Q @ L["S"]
        D = L["S"] @ U + L["d"]
        u = L["tau"] - L["S"] @ q
        Qa = Q - np.outer(U, U) / D
        C, t = L["X"].T @ Qa @ L["X"], L["X"].T @ (q + Qa @ L["c"] + U * u / D)
    return C, t


def element(links):
    P0, Phi, G, p0, eta = np.zeros((6, 6)), np.eye(6), np.zeros((6, 6)), np.zeros(6), np.zeros(6)
    for L in reversed(links):
        S, X = L["S"], L["X"]
        Q0 = L["J"] + P0
        U0 = Q0 @ S
        D0 = S @ U0 + L["d"]
        g = Phi.T @ S
        h = L["pb"] + p0 + Q0 @ L["c"]
        r = (S @ h - L["tau"]) / D0
        eta = eta + Phi.T @ (L["c"] - S * r)
        p0 = X.T @ (h - U0 * r)
        G = G + np.outer(g, g) / D0
        Phi = X.T @ (Phi - np.outer(U0, g) / D0)
        P0 = X.T @ (Q0 - np.outer(U0, U0) / D0) @ X
    return P0, Phi, G, p0, eta


def compose5(E1, E2):
    P01, Phi1, G1, p01, e1 = E1
    P02, Phi2, G2, p02, e2 = E2
    A = np.linalg.inv(np.eye(6) + P02 @ G1)
    B = np.linalg.inv(np.eye(6) + G1 @ P02)
    return (P01 + Phi1 @ A @ P02 @ Phi1.T, Phi1 @ A @ Phi2, G2 + Phi2.T @ B @ G1 @ Phi2,
            p01 + Phi1 @ A @ (p02 + P02 @ e1), e2 + Phi2.T @ B @ (e1 - G1 @ p02))


def bias_forces(sizes, rng):
    print("\nwith the bias force in the element: base inertia and bias force against the sequential "
          "sweeps (double), max |error| / max |value|")
    for n in sizes:
        links = chain_with_bias(n, rng)
        C, t = sweep_with_bias(links)
        starts = [0]
        while starts[-1] < n:
            e = min(starts[-1] + BLOCK, n)
            while e < n and not links[e - 1]["J"].any() and links[e - 1]["d"] == 0:
                e += 1
            starts.append(e)
        E = [element(links[starts[b]:starts[b + 1]]) for b in range(len(starts) - 1)]
        while len(E) > 1:
            E = [compose5(E[i], E[i + 1]) if i + 1 < len(E) else E[i] for i in range(0, len(E), 2)]
        P0, _, _, p0, _ = E[0]
        print(f"n={n:6d}  inertia {np.abs(P0 - C).max() / np.abs(C).max():.1e}  "
              f"bias force {np.abs(p0 - t).max() / np.abs(t).max():.1e}")


if __name__ == "__main__":
    main()
