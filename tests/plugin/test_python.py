"""The chainfd plugin from Python: mujoco.mj_loadPluginLibrary through chainfd.load(), a model
declaring the plugin compiled by MjModel.from_xml_path, chainfd.step / chainfd.forward against
mujoco.mj_step / mj_forward, config errors, fallback both ways, threads.

Run with the venv that has the mujoco wheel: PYTHONPATH=python CHAINFD_PLUGIN_PATH=... python this.
"""

import os
import sys
import threading

import numpy as np

import mujoco
import chainfd

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []


def expect(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAILED:", msg, file=sys.stderr)


TEMPLATE = """
<mujoco>
  <extension><plugin plugin="chainfd"><instance name="fd">{config}</instance></plugin></extension>
  <option timestep="0.002"/>
  <default><geom type="capsule" size="0.03" contype="0" conaffinity="0"/>
           <joint damping="0.2" armature="0.01"/></default>
  <worldbody>
    <body pos="0 0 1"><joint name="j1" axis="0 1 0" {joint1}/><geom fromto="0 0 0 0.3 0 0"/>
      <body pos="0.3 0 0"><joint axis="1 0 0"/><geom fromto="0 0 0 0.3 0 0"/>
        <body pos="0.3 0 0"><joint axis="0 1 0"/><geom fromto="0 0 0 0.3 0 0"/></body>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def chain(config="", joint1=""):
    return mujoco.MjModel.from_xml_string(TEMPLATE.format(config=config, joint1=joint1))


def start(model, data, scale=0.4):
    data.qpos[:] = model.qpos0 + scale * np.sin(1.3 * np.arange(model.nq) + 0.4)
    data.qvel[:] = scale * np.cos(0.7 * np.arange(model.nv) + 0.1)
    data.ctrl[:] = 0.3 * np.sin(np.arange(model.nu) + 1.0)


def state(model, data):
    n = mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_INTEGRATION)
    out = np.empty(n)
    mujoco.mj_getState(model, data, out, mujoco.mjtState.mjSTATE_INTEGRATION)
    return out


def test_load():
    path = chainfd.load()
    expect(os.path.samefile(path, chainfd.plugin_path()), "load() returns the plugin path")
    expect(chainfd.load() == path, "load() twice")


def test_arms():
    for scene in ("arm7_plugin.xml", "servo_arm_plugin.xml"):
        model = mujoco.MjModel.from_xml_path(os.path.join(HERE, scene))
        for integrator in (mujoco.mjtIntegrator.mjINT_EULER, mujoco.mjtIntegrator.mjINT_IMPLICITFAST,
                           mujoco.mjtIntegrator.mjINT_RK4):
            model.opt.integrator = integrator
            ref, got = mujoco.MjData(model), mujoco.MjData(model)
            start(model, ref)
            start(model, got)
            worst = 0.0
            for _ in range(100):
                mujoco.mj_step(model, ref)
                chainfd.step(model, got)
                worst = max(worst, np.abs(got.qpos - ref.qpos).max())
            print(f"python {scene} {integrator.name}: max |dqpos| = {worst:.3e} over 100 steps")
            expect(worst <= 1e-9, f"{scene} {integrator.name}: {worst}")
            st = chainfd.stats(model, got)
            expect(st["steps_chainfd"] == 100 and st["backend"] == "cpu.fast", f"stats {st}")
            mujoco.mj_forward(model, ref)
            chainfd.forward(model, got)
            err = np.abs(got.qacc - ref.qacc).max() / np.abs(ref.qacc).max()
            expect(err <= 1e-10, f"forward qacc {err}")


def test_config_errors():
    for config, needle in [
        ('<config key="backend" value="xyz"/>', "backend='xyz'"),
        ('<config key="precision" value="float"/>', "precision='float'"),
        ('<config key="device" value="7"/><config key="backend" value="cfa"/>', "device='7'"),
        ('<config key="fallback" value="never"/>', "fallback='never'"),
    ]:
        model = chain(config)
        data = mujoco.MjData(model)
        start(model, data)
        before = state(model, data)
        try:
            chainfd.step(model, data)
            expect(False, f"{config}: no error")
        except chainfd.ChainfdError as e:
            expect(needle in str(e) and e.code == 2, f"{config}: {e}")
            print(f"python config {config} -> {e}")
        expect(np.array_equal(before, state(model, data)), f"{config}: state changed")
    try:
        chain('<config key="backnd" value="cfa"/>')
        expect(False, "unknown key accepted")
    except ValueError as e:
        expect("backnd" in str(e), f"unknown key: {e}")
    model = mujoco.MjModel.from_xml_string(
        '<mujoco><worldbody><body><joint/><geom size="0.1"/></body></worldbody></mujoco>')
    try:
        chainfd.step(model, mujoco.MjData(model))
        expect(False, "no instance: no error")
    except chainfd.ChainfdError as e:
        expect(e.code == 1, f"no instance: {e}")


def side_by_side(model, steps=20):
    """mj_step and chainfd.step from the same start: (MuJoCo's data, chainfd's)"""
    ref, got = mujoco.MjData(model), mujoco.MjData(model)
    start(model, ref, 1.0)
    start(model, got, 1.0)
    for _ in range(steps):
        mujoco.mj_step(model, ref)
        chainfd.step(model, got)
    return ref, got


def test_fallback():
    # a limit row: chainfd's solver takes it; with a noslip pass after the solver it is MuJoCo's
    limit = 'limited="true" range="-0.1 0.1"'
    model = chain('<config key="backend" value="cpu"/><config key="fallback" value="error"/>', limit)
    ref, got = side_by_side(model)
    expect(np.abs(got.qpos - ref.qpos).max() < 1e-12, "a limit row solved by chainfd equals mj_step")
    expect(chainfd.stats(model, got)["steps_chainfd"] == 20, "the limit's steps are chainfd's")

    model = chain('<config key="fallback" value="mujoco"/>', limit)
    model.opt.noslip_iterations = 2
    ref, got = side_by_side(model)
    expect(np.array_equal(state(model, ref), state(model, got)), "fallback=mujoco equals mj_step")
    expect(chainfd.stats(model, got)["steps_mujoco"] == 20, "fallback counted")

    model = chain('<config key="fallback" value="error"/>', limit)
    model.opt.noslip_iterations = 2
    data = mujoco.MjData(model)
    start(model, data, 1.0)
    before = state(model, data)
    try:
        chainfd.step(model, data)
        expect(False, "fallback=error: no error")
    except chainfd.ChainfdError as e:
        expect(e.code == 3 and "noslip_iterations" in str(e), f"fallback=error: {e}")
    expect(np.array_equal(before, state(model, data)), "fallback=error changed the state")


def test_threads():
    model = mujoco.MjModel.from_xml_path(os.path.join(HERE, "arm7_plugin.xml"))
    serial, parallel = [], []
    for i in range(8):
        a, b = mujoco.MjData(model), mujoco.MjData(model)
        start(model, a, 0.1 * (i + 1))
        start(model, b, 0.1 * (i + 1))
        serial.append(a)
        parallel.append(b)
    for d in serial:
        for _ in range(200):
            chainfd.step(model, d)
    errors = []

    def run(d):
        try:
            for _ in range(200):
                chainfd.step(model, d)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(d,)) for d in parallel]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expect(not errors, f"thread errors {errors}")
    for a, b in zip(serial, parallel):
        expect(np.array_equal(state(model, a), state(model, b)), "thread differs from serial")


def test_copies():
    """copy, deepcopy and pickle of an MjData: each copy steps with its own chainfd state, whatever
    is deleted first (an unpickled MjData holds its original's plugin_data pointer)."""
    import copy
    import gc
    import pickle
    model = mujoco.MjModel.from_xml_path(os.path.join(HERE, "double_pendulum_plugin.xml"))
    for make in (copy.copy, copy.deepcopy, lambda d: pickle.loads(pickle.dumps(d))):
        data = mujoco.MjData(model)
        chainfd.step(model, data)
        other = make(data)
        del data
        gc.collect()  # the original's state is freed: the copy must not touch it
        for _ in range(3):
            chainfd.step(model, other)
        expect(chainfd.stats(model, other)["steps_chainfd"] >= 3, "a copy steps with chainfd")
        del other
        gc.collect()
    print("copies: copy, deepcopy and pickle step on their own state")


if __name__ == "__main__":
    test_load()
    test_arms()
    test_config_errors()
    test_fallback()
    test_threads()
    test_copies()
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        sys.exit(1)
    print("all checks passed")
