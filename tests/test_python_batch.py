"""The Python bindings of the batched forward dynamics and the rollout, against MuJoCo itself.

--gpu: the same on CUDA device 0 (exit 77, SKIPPED, where chainfd has no CUDA device)."""
import os
import sys

import mujoco
import numpy as np

import chainfd
from chainfd.batch import ForwardDynamics
from chainfd.rollout import Rollout

SCENES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenes")


def test_forward_dynamics(model, backend, device=-1):
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
    rng = np.random.default_rng(1)
    data = mujoco.MjData(model)
    B = 16
    qpos = model.qpos0 + rng.uniform(-1, 1, (B, model.nq))
    qvel = rng.uniform(-1, 1, (B, model.nv))
    qfrc, ref = np.empty((B, model.nv)), np.empty((B, model.nv))
    for b in range(B):
        data.qpos[:], data.qvel[:] = qpos[b], qvel[b]
        data.ctrl[:] = rng.uniform(-1, 1, model.nu)
        mujoco.mj_forward(model, data)
        qfrc[b] = data.qfrc_passive + data.qfrc_actuator + data.qfrc_applied
        ref[b] = data.qacc
    fd = ForwardDynamics(model, backend, device=device)
    got = fd(qpos, qvel, qfrc)
    err = np.abs(got - ref).max() / np.abs(ref).max()
    print(f"ForwardDynamics {fd.backend}: max_rel_err {err:.2e} over {B} states")
    assert err < 1e-10, err


def test_rollout(model, device=-1):
    r = Rollout(model, device=device)
    data = mujoco.MjData(model)
    rng = np.random.default_rng(2)
    ctrl = rng.uniform(-1, 1, (3, 50, model.nu))
    traj = r.run(r.state(data), ctrl)
    worst = 0.0
    for b in range(3):
        mujoco.mj_resetData(model, data)
        for t in range(50):
            data.ctrl[:] = ctrl[b, t]
            mujoco.mj_step(model, data)
            worst = max(worst, np.abs(traj[b, t + 1, :model.nq] - data.qpos).max())
    print(f"Rollout: max |dqpos| against mj_step {worst:.2e}")
    assert worst < 1e-9, worst
    # into a page-locked array (chainfd_host_alloc): the same trajectories
    out = r.pinned(traj.shape)
    again = r.run(traj[:, 0].copy(), ctrl, out=out)
    assert again is out and np.array_equal(out, traj), np.abs(out - traj).max()
    try:
        r.run(r.state(data), ctrl, out=np.empty((3, 50, 2)))
        raise AssertionError("a wrong out shape was accepted")
    except ValueError as e:
        print(f"Rollout: bad out refused: {e}")
    assert not r.warnings().any() and r.total_warnings() == 0


def test_rollout_bad_state(model, device=-1):
    """A NaN start in one instance: mj_step's warning and reset there, the others untouched."""
    r = Rollout(model, device=device)
    data = mujoco.MjData(model)
    rng = np.random.default_rng(3)
    init = np.tile(r.state(data), (3, 1)) + rng.uniform(-0.5, 0.5, (3, model.nq + model.nv))
    init[1, 0] = np.nan
    ctrl = rng.uniform(-1, 1, (3, 20, model.nu))
    traj = r.run(init, ctrl)
    warnings = r.warnings()
    worst = 0.0
    for b in range(3):
        mujoco.mj_resetData(model, data)
        data.qpos[:], data.qvel[:] = init[b, :model.nq], init[b, model.nq:]
        for t in range(20):
            data.ctrl[:] = ctrl[b, t]
            mujoco.mj_step(model, data)
            worst = max(worst, np.abs(traj[b, t + 1, :model.nq] - data.qpos).max())
    print(f"Rollout with a NaN start: warnings {warnings.tolist()}, max |dqpos| against mj_step "
          f"{worst:.2e}")
    assert warnings.tolist() == [0, 1, 0] and r.total_warnings() == 1, warnings
    assert worst < 1e-9, worst


def test_handles(device=-1):
    """Closed handles raise instead of passing NULL to C; a batch past a C int is refused; one
    ForwardDynamics shared by threads gives each its own right answer (calls take turns); a failed
    rollout reports no warnings from before its failure."""
    import threading
    arm = mujoco.MjModel.from_xml_path(os.path.join(SCENES, "arm7.xml"))
    arm.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
    fd, r = ForwardDynamics(arm, "auto", device=device), Rollout(arm, device)
    data = mujoco.MjData(arm)
    qpos, qvel = np.tile(arm.qpos0, (4, 1)), np.zeros((4, arm.nv))
    ref = fd(qpos, qvel, np.zeros((4, arm.nv)))
    results, errors = [], []

    def work(k):
        try:
            for _ in range(50):
                n = 1 + (k * 7) % 300  # sizes that grow and shrink the C buffers
                got = fd(np.tile(arm.qpos0, (n, 1)), np.zeros((n, arm.nv)), np.zeros((n, arm.nv)))
                results.append(np.abs(got - ref[0]).max())
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and max(results) == 0, (errors, max(results, default=None))
    huge = np.broadcast_to(np.zeros(1), (2**32 + 3, 1, arm.nu))  # (no memory behind it)
    for call in (lambda: r.run(r.state(data), huge, final_only=True),):
        try:
            call()
            raise AssertionError("a batch past a C int was run")
        except ValueError as e:
            print(f"handles: refused: {e}")
    fd.close()
    r.close()
    for call in (lambda: fd(qpos, qvel, qvel), lambda: r.total_warnings(), lambda: fd.backend):
        try:
            call()
            raise AssertionError("a closed handle was used")
        except ValueError:
            pass
    fd.close()  # twice: nothing
    # a failed run: instance 0 warns (a NaN control), instance 1's reset state is singular
    m = mujoco.MjModel.from_xml_string(
        '<mujoco><worldbody><body><joint name="j1" axis="0 0 1"/><geom type="sphere" size=".01" '
        'contype="0" conaffinity="0" mass="1"/><body><joint name="j2" axis="0 1 0"/><geom '
        'type="sphere" size=".01" pos="0 0 1" contype="0" conaffinity="0" mass="1"/></body></body>'
        '</worldbody><actuator><motor joint="j2"/></actuator></mujoco>')
    m.body_mass[1] = 0
    m.body_inertia[1] = m.body_inertia[2] = 0
    m.dof_armature[:] = 0
    bad = Rollout(m, device)
    ctrl = np.zeros((2, 2, 1))
    ctrl[0, 0, 0] = np.nan
    mujoco.set_mju_user_warning(lambda msg: None)
    try:
        bad.run(np.array([[0.0, 0.5, 0, 0], [np.nan, 0, 0, 0]]), ctrl)
        raise AssertionError("a rollout through a singular reset state succeeded")
    except chainfd.ChainfdError as e:
        print(f"handles: failed run: {e}")
    finally:
        mujoco.set_mju_user_warning(None)
    assert bad.total_warnings() == 0 and bad.warnings().size == 0, bad.total_warnings()
    print("handles: closed handles raise, threads take turns, a failed run reports no warnings")


def test_extended(device=-1):
    """An extended chain: at its own length the plain rollout's bits; the links' poses against
    MuJoCo's; at 10 times its length a finite run whose state has 2 x links entries."""
    model = mujoco.MjModel.from_xml_path(os.path.join(SCENES, "double_pendulum.xml"))
    data = mujoco.MjData(model)
    rng = np.random.default_rng(4)
    data.qpos[:] = rng.uniform(-1, 1, model.nq)
    data.qvel[:] = rng.uniform(-1, 1, model.nv)
    plain, same = Rollout(model, device), Rollout(model, device, links=model.nv)
    ctrl = np.zeros((2, 40, 0))
    a, b = plain.run(plain.state(data), ctrl), same.run(same.state(data), ctrl)
    assert np.array_equal(a, b), np.abs(a - b).max()
    mujoco.mj_kinematics(model, data)
    xpos, xmat = same.link_poses(data.qpos.copy())
    bodies = model.dof_bodyid[same._dof]
    err = max(np.abs(xpos - data.xpos[bodies]).max(),
              np.abs(xmat.reshape(-1, 9) - data.xmat[bodies]).max())
    assert err < 1e-12, err
    long = Rollout(model, device, links=10 * model.nv)
    traj = long.run(long.state(data), np.zeros((1, 100, 0)), final_only=True)
    assert traj.shape == (1, 2 * long.links) and np.isfinite(traj).all()
    print(f"Rollout extended: own length bit for bit, poses against MuJoCo {err:.1e}, "
          f"{long.links} links finite")
    try:
        Rollout(mujoco.MjModel.from_xml_path(os.path.join(SCENES, "arm7.xml")), device, links=70)
        raise AssertionError("an actuated chain was extended")
    except chainfd.ChainfdError as e:
        print(f"Rollout extended: refused: {e}")


def test_tree(device=-1):
    """A hinge and a ball joint (tests/models/ball.xml): forward dynamics with quaternions in qpos,
    and a rollout whose state holds the ball's rotation vector, against MuJoCo."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", "ball.xml")
    model = mujoco.MjModel.from_xml_path(path)
    rng = np.random.default_rng(3)
    data = mujoco.MjData(model)
    B = 8
    qpos, qvel = np.empty((B, model.nq)), rng.uniform(-1, 1, (B, model.nv))
    qfrc, ref = np.empty((B, model.nv)), np.empty((B, model.nv))
    for b in range(B):
        quat = rng.normal(size=4)
        data.qpos[:] = np.concatenate([[rng.uniform(-1, 1)], quat / np.linalg.norm(quat)])
        data.qvel[:] = qvel[b]
        mujoco.mj_forward(model, data)
        qpos[b] = data.qpos
        qfrc[b], ref[b] = data.qfrc_passive + data.qfrc_applied, data.qacc
    backend = "cuda.abia" if device >= 0 else "cpu.fast"
    got = ForwardDynamics(model, backend, device=device)(qpos, qvel, qfrc)
    err = np.abs(got - ref).max() / np.abs(ref).max()
    print(f"ForwardDynamics {backend} on a ball joint: max_rel_err {err:.2e}")
    assert err < 1e-10, err
    r = Rollout(model, device=device)
    data.qpos[:], data.qvel[:] = qpos[0], qvel[0]
    x0 = r.state(data)
    traj = r.run(x0, np.zeros((1, 50, 0)))
    worst = 0.0
    for t in range(50):
        mujoco.mj_step(model, data)
        worst = max(worst, np.abs(traj[0, t + 1] - r.state(data)).max())
    print(f"Rollout with a ball joint: max |dx| against mj_step {worst:.2e}")
    assert worst < 1e-9, worst
    back = mujoco.MjData(model)
    r.set_state(back, traj[0, -1])
    # (a quaternion and its negative are one rotation: set_state gives the one with w >= 0)
    dq = min(np.abs(back.qpos[1:] - data.qpos[1:]).max(), np.abs(back.qpos[1:] + data.qpos[1:]).max())
    assert abs(back.qpos[0] - data.qpos[0]) < 1e-12 and dq < 1e-12, (back.qpos, data.qpos)
    assert np.array_equal(back.qvel, traj[0, -1, model.nv:])


if __name__ == "__main__":
    chainfd.load()
    gpu = "--gpu" in sys.argv[1:]
    if gpu and chainfd.gpu_count() == 0:
        print("SKIPPED: no CUDA device")
        sys.exit(77)
    device = 0 if gpu else -1
    arm = mujoco.MjModel.from_xml_path(os.path.join(SCENES, "arm7.xml"))
    backends = ("cuda.abia", "cuda.jsiia", "cuda.cfa") if gpu else (
        "cpu.fast", "cpu.abia", "cpu.jsiia", "cpu.cfa")
    for backend in backends + ("auto",):
        test_forward_dynamics(arm, backend, device)
    test_rollout(mujoco.MjModel.from_xml_path(os.path.join(SCENES, "arm7.xml")), device)
    test_rollout_bad_state(mujoco.MjModel.from_xml_path(os.path.join(SCENES, "arm7.xml")), device)
    test_extended(device)
    test_handles(device)
    test_tree(device)
    print("all checks passed")
    sys.exit(0)
