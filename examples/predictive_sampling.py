"""Predictive sampling on the 7-dof arm, in Python: the C example's loop (examples/predictive_sampling.c)
with chainfd.rollout.Rollout and NumPy. Prints the cost falling.

    .deps/venv/bin/python examples/predictive_sampling.py [--samples B] [--iters N] [--cpu]
"""
import argparse
import os

import mujoco
import numpy as np

import chainfd
from chainfd.rollout import Rollout

KNOTS, KNOT = 5, 40
HORIZON = KNOTS * KNOT


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("model", nargs="?", default=os.path.join(here, "..", "scenes", "arm7.xml"))
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--cpu", action="store_true")
    a = ap.parse_args()

    chainfd.load()
    model = mujoco.MjModel.from_xml_path(a.model)
    data = mujoco.MjData(model)
    device = -1 if a.cpu else 0
    try:
        roll = Rollout(model, device)
    except chainfd.ChainfdError as e:
        if device < 0:
            raise
        print(f"no GPU rollout ({e}); using the CPU")
        device, roll = -1, Rollout(model, -1)
    n, nu = model.nv, model.nu
    rng = np.random.default_rng(2024)
    target = model.qpos0 + rng.uniform(-0.8, 0.8, n)
    lo, hi = model.actuator_ctrlrange[:, 0], model.actuator_ctrlrange[:, 1]
    nominal = np.zeros((KNOTS, nu))
    print(f"predictive sampling: {a.samples} samples x {HORIZON} steps per iteration, "
          f"on {'the GPU' if device >= 0 else 'the CPU'}")
    first = last = None
    for it in range(a.iters):
        knots = nominal[None] + 0.15 * rng.standard_normal((a.samples, KNOTS, nu))
        knots[0] = nominal  # sample 0: the nominal itself
        knots = np.clip(knots, lo, hi)
        ctrl = np.repeat(knots, KNOT, axis=1)  # (B, HORIZON, nu): each knot held KNOT steps
        traj = roll.run(roll.state(data), ctrl)  # (B, HORIZON+1, 2n)
        q, v = traj[:, 1:, :n], traj[:, 1:, n:]
        cost = (((q - target) ** 2).sum(-1) + 0.01 * (v ** 2).sum(-1)).mean(-1)
        cost += 1e-4 * (ctrl ** 2).sum((1, 2)) / HORIZON
        best = int(np.argmin(cost))
        first = cost[0] if first is None else first
        last = cost[best]
        nominal = np.concatenate([knots[best, 1:], knots[best, -1:]])  # shift by one knot
        data.ctrl[:] = knots[best, 0]
        for _ in range(KNOT // 4):  # replan every quarter knot
            mujoco.mj_step(model, data)
        if it % 5 == 0 or it == a.iters - 1:
            print(f"iter {it:3d}  nominal cost {cost[0]:9.5f}  best sampled {cost[best]:9.5f}  "
                  f"|q - target| {np.linalg.norm(data.qpos - target):.4f}")


    reduced = last < first
    print(f"cost {'reduced' if reduced else 'NOT reduced'} from {first:.5f} to {last:.5f}")
    return 0 if reduced else 1


if __name__ == "__main__":
    raise SystemExit(main())
