"""The Python bindings of chainfd's derivatives (chainfd.derivatives), against MuJoCo's
mjd_transitionFD and against the batch of one call per state.

--gpu: the batch on CUDA device 0 (exit 77, SKIPPED, where chainfd has no CUDA device)."""
import os
import sys

import mujoco
import numpy as np

import chainfd
from chainfd.derivatives import Derivatives, derivatives

SCENES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenes")
TESTS = os.path.dirname(os.path.abspath(__file__))


def main():
    model = mujoco.MjModel.from_xml_path(os.path.join(SCENES, "arm7.xml"))
    data = mujoco.MjData(model)
    rng = np.random.default_rng(3)
    data.qpos[:] = rng.uniform(-0.5, 0.5, model.nq)
    data.qvel[:] = rng.uniform(-1, 1, model.nv)
    data.ctrl[:] = rng.uniform(-0.5, 0.5, model.nu)
    device = -1
    if len(sys.argv) > 1 and sys.argv[1] == "--gpu":
        if chainfd.gpu_count() == 0:
            print("SKIPPED: no CUDA device")
            return 77
        device = 0
    d = Derivatives(model, device=device)
    qacc, dq, dv, du = d.qacc(data)
    mujoco.mj_forward(model, data)
    assert np.abs(qacc - data.qacc).max() < 1e-10 * max(1, np.abs(data.qacc).max())
    # the step's A and B against mjd_transitionFD (centred, eps 1e-6)
    A, B = d.transition(data)
    nx = 2 * model.nv
    Am, Bm = np.empty((nx, nx)), np.empty((nx, model.nu))
    mujoco.mjd_transitionFD(model, data, 1e-6, 1, Am, Bm, None, None)
    ea, eb = np.abs(A - Am).max() / np.abs(Am).max(), np.abs(B - Bm).max() / np.abs(Bm).max()
    print(f"transition against mjd_transitionFD: A {ea:.2e} B {eb:.2e}")
    assert ea < 1e-5 and eb < 1e-5, (ea, eb)
    # the function form gives the same
    q2, dq2, dv2, du2 = derivatives(model, data)
    assert np.array_equal(dq, dq2) and np.array_equal(du, du2)
    # the batch against one call per state
    Bn = 64
    x = np.empty((Bn, nx))
    u = rng.uniform(-0.5, 0.5, (Bn, model.nu))
    want = []
    for b in range(Bn):
        data.qpos[:] = rng.uniform(-0.5, 0.5, model.nq)
        data.qvel[:] = rng.uniform(-1, 1, model.nv)
        data.ctrl[:] = u[b]
        x[b] = np.concatenate([data.qpos, data.qvel])
        want.append(d.qacc(data)[1:])
    bq, bv, bu = d.batch(x, u)
    err = max(np.abs(bq[b] - want[b][0]).max() / np.abs(want[b][0]).max() for b in range(Bn))
    err = max(err, max(np.abs(bv[b] - want[b][1]).max() / np.abs(want[b][1]).max() for b in range(Bn)))
    print(f"batch of {Bn} on {'GPU 0' if device >= 0 else 'the CPU'} against one call each: {err:.2e}")
    assert err < 1e-12, err
    # refusals name the element
    bad = mujoco.MjModel.from_xml_path(os.path.join(SCENES, "humanoid_tree.xml"))
    try:
        Derivatives(bad)
        raise AssertionError("a ball joint with a spring was taken")
    except chainfd.ChainfdError as e:
        assert "'left_hip' is a ball joint: it has a spring" in str(e), e
    if device < 0:  # the constrained step (the CPU's): limits and friction loss, against
        # mjd_transitionFD on the model with its solver converged
        arm = mujoco.MjModel.from_xml_path(os.path.join(TESTS, "constraints", "arm_limits_friction.xml"))
        arm.opt.tolerance, arm.opt.iterations = 1e-15, 1000
        ad = mujoco.MjData(arm)
        ad.qpos[:] = rng.uniform(arm.jnt_range[:, 0] * 1.1, arm.jnt_range[:, 1] * 1.1)
        ad.qvel[:] = rng.uniform(-1, 1, arm.nv)
        ad.ctrl[:] = rng.uniform(-0.5, 0.5, arm.nu)
        mujoco.mj_forward(arm, ad)
        qa, _, _, _ = Derivatives(arm).qacc(ad)
        assert np.abs(qa - ad.qacc).max() < 1e-8 * max(1, np.abs(ad.qacc).max())
        A, B = Derivatives(arm).transition(ad)
        nx = 2 * arm.nv
        Am, Bm = np.empty((nx, nx)), np.empty((nx, arm.nu))
        mujoco.mjd_transitionFD(arm, ad, 1e-5, 1, Am, Bm, None, None)
        ea, eb = np.abs(A - Am).max() / np.abs(Am).max(), np.abs(B - Bm).max() / np.abs(Bm).max()
        print(f"arm with limits and friction loss ({ad.nefc} rows) against mjd_transitionFD: "
              f"A {ea:.2e} B {eb:.2e}")
        assert ea < 1e-5 and eb < 1e-5, (ea, eb)
    if device < 0:  # a free base with balls and hinges, in MuJoCo's tangent space (the CPU's)
        snake = mujoco.MjModel.from_xml_path(os.path.join(SCENES, "floating_snake.xml"))
        sd = mujoco.MjData(snake)
        mujoco.mj_resetData(snake, sd)
        sd.qvel[:] = rng.uniform(-1, 1, snake.nv)
        sd.ctrl[:] = rng.uniform(-0.5, 0.5, snake.nu)
        mujoco.mj_forward(snake, sd)
        A, B = Derivatives(snake).transition(sd)
        nx = 2 * snake.nv
        Am, Bm = np.empty((nx, nx)), np.empty((nx, snake.nu))
        mujoco.mjd_transitionFD(snake, sd, 1e-6, 1, Am, Bm, None, None)
        ea, eb = np.abs(A - Am).max() / np.abs(Am).max(), np.abs(B - Bm).max() / np.abs(Bm).max()
        print(f"floating snake (free base, balls) against mjd_transitionFD: A {ea:.2e} B {eb:.2e}")
        assert ea < 1e-5 and eb < 1e-5, (ea, eb)
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
