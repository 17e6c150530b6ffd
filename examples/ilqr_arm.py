"""iLQR on the 7-dof arm (the C example examples/ilqr_arm.c, in NumPy): bring the hand to a target
point and stop, with the step's Jacobians from chainfd (analytical, mjd_transitionFD's layout)
and the trajectory from mujoco.mj_step. Prints the cost per iteration; exits 1 unless it fell to
a quarter of the first with the hand within 5 cm of the target.

    PYTHONPATH=python python examples/ilqr_arm.py [--iters N] [--horizon T]
"""
import argparse
import os
import sys

import mujoco
import numpy as np

from chainfd.derivatives import Derivatives

WP, WV, WU, WP_T, WV_T = 1.0, 1e-3, 1e-3, 200.0, 1.0
SCENES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenes")


class Arm:
    def __init__(self, model, target, u0):
        self.m, self.d = model, mujoco.MjData(model)
        self.nv, self.nu, self.body = model.nv, model.nu, model.nbody - 1
        self.target, self.u0 = target, u0
        self.jac = np.empty((3, model.nv))

    def set(self, x):
        self.d.qpos[:], self.d.qvel[:] = x[:self.nv], x[self.nv:]

    def cost(self, x, u=None, grad=False):
        """The cost at (x, u) (u None: terminal), with its gradient and Gauss-Newton Hessian."""
        nv = self.nv
        self.set(x)
        mujoco.mj_kinematics(self.m, self.d)
        mujoco.mj_comPos(self.m, self.d)
        e = self.d.xpos[self.body] - self.target
        wp, wv = (WP, WV) if u is not None else (WP_T, WV_T)
        c = 0.5 * wp * e @ e + 0.5 * wv * x[nv:] @ x[nv:]
        if u is not None:
            c += 0.5 * WU * (u - self.u0) @ (u - self.u0)
        if not grad:
            return c
        mujoco.mj_jacBody(self.m, self.d, self.jac, None, self.body)
        lx = np.concatenate([wp * self.jac.T @ e, wv * x[nv:]])
        lxx = np.zeros((2 * nv, 2 * nv))
        lxx[:nv, :nv] = wp * self.jac.T @ self.jac
        lxx[nv:, nv:] = wv * np.eye(nv)
        lu = None if u is None else WU * (u - self.u0)
        return c, lx, lxx, lu

    def rollout(self, x0, us, K=None, k=None, xs=None, alpha=1.0):
        """The trajectory from x0 under us (or, with a policy, us + alpha k + K (x - xs))."""
        T = len(us)
        xn, un, c = np.empty((T + 1, 2 * self.nv)), np.empty_like(us), 0.0
        xn[0] = x0
        for t in range(T):
            un[t] = us[t] if K is None else us[t] + alpha * k[t] + K[t] @ (xn[t] - xs[t])
            c += self.cost(xn[t], un[t])
            self.set(xn[t])
            self.d.ctrl[:] = un[t]
            mujoco.mj_step(self.m, self.d)
            xn[t + 1] = np.concatenate([self.d.qpos, self.d.qvel])
        return xn, un, c + self.cost(xn[T])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--horizon", type=int, default=150)
    args = ap.parse_args()
    model = mujoco.MjModel.from_xml_path(os.path.join(SCENES, "arm7.xml"))
    nv, nu, T = model.nv, model.nu, args.horizon
    x0 = np.concatenate([0.3 * np.sin(1.3 * np.arange(nv) + 0.5), np.zeros(nv)])
    u0 = x0[model.jnt_qposadr[model.actuator_trnid[:, 0]]]
    arm = Arm(model, np.array([0.4, 0.3, 0.5]), u0)
    dv = Derivatives(model)
    us = np.tile(u0, (T, 1))
    xs, us, c = arm.rollout(x0, us)
    first, mu = c, 1e-6
    print(f"ilqr_arm.py: horizon {T} steps, cost {c:.6g}")
    data = mujoco.MjData(model)
    for it in range(1, args.iters + 1):
        A, B = np.empty((T, 2 * nv, 2 * nv)), np.empty((T, 2 * nv, nu))
        for t in range(T):
            data.qpos[:], data.qvel[:], data.ctrl[:] = xs[t, :nv], xs[t, nv:], us[t]
            A[t], B[t] = dv.transition(data)
        while True:  # the backward pass, mu raised until every Quu is positive definite
            _, Vx, Vxx, _ = arm.cost(xs[T], grad=True)
            K, k, ok = np.empty((T, nu, 2 * nv)), np.empty((T, nu)), True
            for t in reversed(range(T)):
                _, lx, lxx, lu = arm.cost(xs[t], us[t], grad=True)
                Qx, Qu = lx + A[t].T @ Vx, lu + B[t].T @ Vx
                Qxx = lxx + A[t].T @ Vxx @ A[t]
                Quu = WU * np.eye(nu) + B[t].T @ Vxx @ B[t] + mu * np.eye(nu)
                Qux = B[t].T @ Vxx @ A[t]
                try:
                    L = np.linalg.cholesky(Quu)
                except np.linalg.LinAlgError:
                    ok = False
                    break
                k[t] = -np.linalg.solve(L.T, np.linalg.solve(L, Qu))
                K[t] = -np.linalg.solve(L.T, np.linalg.solve(L, Qux))
                Quu -= mu * np.eye(nu)
                Vx = Qx + K[t].T @ Quu @ k[t] + K[t].T @ Qu + Qux.T @ k[t]
                Vxx = Qxx + K[t].T @ Quu @ K[t] + K[t].T @ Qux + Qux.T @ K[t]
                Vxx = 0.5 * (Vxx + Vxx.T)
            if ok or mu > 1e6:
                break
            mu *= 10
        alpha, cn = 1.0, np.inf
        for _ in range(10):
            xn, un, cn = arm.rollout(x0, us, K, k, xs, alpha)
            if cn < c:
                break
            alpha *= 0.5
        if cn < c:
            xs, us, c, mu = xn, un, cn, max(1e-6, mu / 10)
        else:
            mu *= 10
        print(f"iter {it:2d} cost {c:.6g}")
    arm.set(xs[T])
    mujoco.mj_kinematics(model, arm.d)
    miss = np.linalg.norm(arm.d.xpos[arm.body] - arm.target)
    print(f"hand {miss:.3f} m from the target; cost {c:.6g} from {first:.6g}")
    if not (c < 0.25 * first and miss < 0.05):
        print("FAILED: the cost did not fall to a quarter of the first, or the hand is off")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
