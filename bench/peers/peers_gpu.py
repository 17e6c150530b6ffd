#!/usr/bin/env python3
"""GPU peers of chainfd: MJX (JAX), MuJoCo Warp and mujoco-torch, timed on given MJCF models.

Usage:
  python bench/peers/peers_gpu.py --model arm7=scenes/arm7.xml --model chain64=chain64.xml \
      --batches 1,64,1024,4096,65536 --peers mjx32,mjx64,warp,torch --what fd,step \
      --horizon 64 --states 32 --budget 0.5 --max-compile 120 --out peers_gpu.json

The problem is the same for every engine (and for the CPU peers in peers_cpu.cpp):
  fd:   mjDSBL_CONSTRAINT|CONTACT|ACTUATION|SPRING|DAMPER, so each engine solves
        (M(q) + diag(armature)) qacc = qfrc_applied - bias(q, qvel).
  step: only mjDSBL_CONSTRAINT|CONTACT; actuators, springs, damping on; the model's integrator;
        controls set, qfrc_applied zero.
States: --states K seeded states (numpy default_rng(1)), tiled to fill a batch of B worlds.
Every (peer, model) runs in its own child process (this file with --worker): a crash, a hang
(--max-wall) or a GPU allocator that holds memory (JAX preallocates 75%) then costs only that
pair, and MJX float32 and float64 (jax_enable_x64 is process-wide) never share a process.
Stdout: one line per measurement, e.g.
  peer=mjx32 model=arm7 n=7 B=1024 what=fd us=12.3 err=1.2e-06 compile_s=3.1
`us` is per call for fd (one batched forward of B worlds) and per batch-step for step
(a rollout of H steps per call, total / H). `err` is max over the checked states of
|a - b|_inf / |b|_inf against MuJoCo C in double (qacc for fd; qpos and qvel after one step).
"""

import argparse
import atexit
import importlib.metadata
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

# peer name -> (distributions it needs, precision)
PEERS = {
    "mjx32": (["jax", "jaxlib", "mujoco-mjx"], "float32"),
    "mjx64": (["jax", "jaxlib", "mujoco-mjx"], "float64"),
    "warp": (["warp-lang", "mujoco-warp"], "float32"),
    "torch64": (["torch", "tensordict", "mujoco-torch"], "float64"),
    "torch32": (["torch", "tensordict", "mujoco-torch"], "float32"),
}
ALIASES = {"torch": "torch64"}  # mujoco-torch's documented precision is float64
VERSION_DISTS = ["numpy", "mujoco", "jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda13-pjrt",
                 "jax-cuda12-plugin", "jax-cuda12-pjrt", "mujoco-mjx", "warp-lang", "mujoco-warp",
                 "torch", "tensordict", "mujoco-torch"]


def versions():
    out = {"python": platform.python_version()}
    for dist in VERSION_DISTS:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def missing_dists(peer):
    missing = []
    for dist in PEERS[peer][0]:
        try:
            importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            missing.append(dist)
    return missing


def host_device():
    """A line naming the GPU(s) (nvidia-smi) or, without one, the CPU."""
    if shutil.which("nvidia-smi"):
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
            if r.returncode == 0 and r.stdout.strip():
                return "; ".join(line.strip() for line in r.stdout.strip().splitlines())
        except (OSError, subprocess.SubprocessError):
            pass
    cpu = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu} ({os.cpu_count()} cores), no GPU"


# ---------------------------------------------------------------------------------------------
# The problem: models, flags, states, MuJoCo C reference.

def load_model(path, what):
    """The model with the disable flags of `what` ('fd' or 'step'); refuses non hinge/slide joints."""
    import mujoco
    m = mujoco.MjModel.from_xml_path(path)
    ok = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))
    for j in range(m.njnt):
        if int(m.jnt_type[j]) not in ok:
            name = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j) or f"#{j}"
            raise ValueError(f"joint '{name}' is {mujoco.mjtJoint(int(m.jnt_type[j])).name}; "
                             "only hinge/slide chains are supported")
    D = mujoco.mjtDisableBit
    m.opt.disableflags |= D.mjDSBL_CONSTRAINT | D.mjDSBL_CONTACT
    if what == "fd":
        m.opt.disableflags |= D.mjDSBL_ACTUATION | D.mjDSBL_SPRING | D.mjDSBL_DAMPER
    return m


def make_states(m, k):
    """K seeded states; the four draws are made for both fd and step, so q and qvel agree."""
    import numpy as np
    rng = np.random.default_rng(1)
    qpos = m.qpos0[None, :] + rng.uniform(-math.pi, math.pi, (k, m.nq))  # hinge/slide: nq == nv
    qvel = rng.uniform(-2.0, 2.0, (k, m.nv))
    qfrc = rng.uniform(-1.0, 1.0, (k, m.nv))
    ctrl = rng.uniform(-1.0, 1.0, (k, m.nu))
    lim = m.actuator_ctrllimited.astype(bool)
    if lim.any():
        lo, hi = m.actuator_ctrlrange[:, 0], m.actuator_ctrlrange[:, 1]
        ctrl[:, lim] = np.clip(ctrl[:, lim], lo[lim], hi[lim])
    return {"qpos": qpos, "qvel": qvel, "qfrc_applied": qfrc, "ctrl": ctrl}


def inputs_for(st, what, B):
    """Batch of B worlds: the K states tiled; fd gets qfrc_applied, step gets ctrl (qfrc 0)."""
    import numpy as np
    k = st["qpos"].shape[0]
    idx = np.arange(B) % k
    out = {"qpos": st["qpos"][idx], "qvel": st["qvel"][idx]}
    if what == "fd":
        out["qfrc_applied"] = st["qfrc_applied"][idx]
        out["ctrl"] = np.zeros((B,) + st["ctrl"].shape[1:])
    else:
        out["qfrc_applied"] = np.zeros_like(out["qvel"])
        out["ctrl"] = st["ctrl"][idx]
    return out


def reference(m, st, what):
    """MuJoCo C in double: qacc after mj_forward (fd) or qpos, qvel after one mj_step (step)."""
    import mujoco
    import numpy as np
    d = mujoco.MjData(m)
    k = st["qpos"].shape[0]
    x = inputs_for(st, what, k)
    out = {"qacc": [], "qpos": [], "qvel": []}
    for i in range(k):
        mujoco.mj_resetData(m, d)
        for f in ("qpos", "qvel", "qfrc_applied", "ctrl"):
            getattr(d, f)[:] = x[f][i]
        if what == "fd":
            mujoco.mj_forward(m, d)
            out["qacc"].append(d.qacc.copy())
        else:
            mujoco.mj_step(m, d)
            out["qpos"].append(d.qpos.copy())
            out["qvel"].append(d.qvel.copy())
    return {f: np.array(v) for f, v in out.items() if v}


def rel_err(a, b):
    """max over states of |a - b|_inf / |b|_inf (absolute where |b|_inf is 0)."""
    import numpy as np
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    num = np.abs(a - b).max(axis=1)
    den = np.abs(b).max(axis=1)
    return float(np.max(num / np.where(den > 0, den, 1.0)))


def check(ref, what, got):
    """err and its parts for the first rows of `got` (dict of arrays (k', n)) vs the reference."""
    if what == "fd":
        k = got["qacc"].shape[0]
        e = rel_err(got["qacc"], ref["qacc"][:k])
        return e, {"err_qacc": e}
    k = got["qpos"].shape[0]
    eq = rel_err(got["qpos"], ref["qpos"][:k])
    ev = rel_err(got["qvel"], ref["qvel"][:k])
    return max(eq, ev), {"err_qpos": eq, "err_qvel": ev}


def median_time(call, budget, before=None, min_reps=3, max_reps=100000):
    """Median wall time of call() (which synchronises); warm-up calls (two, or one where a call
    takes longer than the budget) are excluded. before(), if given, runs untimed before each
    call (e.g. to reset a state stepped in place). At least min_reps timed calls."""
    import statistics
    for _ in range(2):
        if before:
            before()
        t0 = time.perf_counter()
        call()
        if time.perf_counter() - t0 > budget:
            break
    ts = []
    end = time.perf_counter() + budget
    while len(ts) < min_reps or (time.perf_counter() < end and len(ts) < max_reps):
        if before:
            before()
        t0 = time.perf_counter()
        call()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), len(ts)


def host_free_bytes():
    """Host memory available (MemAvailable: free plus reclaimable cache), for CPU devices."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


# What each peer's timed call contains (goes into the rows' `note`).
STAGES = ("kinematics, com, crb (mass matrix), factor, rne (bias), solve for qacc; tendon, "
          "transmission and sensor stages run empty here; constraint stage disabled "
          "(mjDSBL_CONSTRAINT|CONTACT)")
STAGES_FD = STAGES + "; passive and actuation disabled"
STAGES_STEP = STAGES + "; passive and actuation on; then the model's integrator"


# ---------------------------------------------------------------------------------------------
# Peers. Each has device(), free_bytes() and build(mjm, what, B, x, kcheck) returning
# (call, before, compile_s, got, note): call() runs one timed unit (fd: one batched forward;
# step: a rollout of H steps) including synchronisation; got holds the first kcheck worlds'
# qacc (fd) or qpos/qvel after one step (step).

class MjxPeer:
    """MJX, impl=jax. The timed program takes the state arrays and returns the result arrays
    (fd: qacc; step: qpos, qvel after H steps); the model and a zero mjx.Data (make_data) are
    closed over, i.e. uploaded once as constants of the program, and vmap builds the batched
    Data from the template and the state. Passing the whole Model and Data pytrees in and out
    of every call instead (--mjx-io data) adds per-buffer dispatch costs (about 200 buffers:
    1 ms per call on a 2-core CPU) that have nothing to do with the dynamics."""

    def __init__(self, x64, horizon, io):
        import jax
        if x64:
            jax.config.update("jax_enable_x64", True)  # before any array: model/data become float64
        import jax.numpy as jnp
        from mujoco import mjx
        self.jax, self.jnp, self.mjx, self.H, self.io = jax, jnp, mjx, horizon, io
        self.dtype = jnp.float64 if x64 else jnp.float32
        self.dev = jax.devices()[0]
        self.compile_per_batch = True  # XLA compiles a program per batch size
        self._step1 = {}  # one-step check programs, by (model, batch)

    def device(self):
        return f"{self.dev.platform}:{getattr(self.dev, 'device_kind', '')}"

    def free_bytes(self):
        stats = self.dev.memory_stats() if self.dev.platform != "cpu" else None
        if stats and "bytes_limit" in stats:
            return stats["bytes_limit"] - stats.get("bytes_in_use", 0)
        return host_free_bytes()

    def build(self, mjm, what, B, x, kcheck):
        jax, jnp, mjx, H = self.jax, self.jnp, self.mjx, self.H
        mx = mjx.put_model(mjm, impl="jax")  # float64 leaves under jax_enable_x64, else float32
        d0 = mjx.make_data(mx)
        names = ("qpos", "qvel", "qfrc_applied", "ctrl")
        state = [jax.device_put(jnp.asarray(x[f], dtype=self.dtype)) for f in names]
        fill = lambda *a: d0.replace(**dict(zip(names, a)))  # one world's Data from its state
        stepB = jax.vmap(mjx.step, in_axes=(None, 0))
        if self.io == "data":  # whole batched Data (and Model) in and out of every call
            args = (mx, jax.jit(jax.vmap(fill))(*state))
            if what == "fd":
                fn = jax.vmap(mjx.forward, in_axes=(None, 0))
            else:
                def fn(m, d):
                    return jax.lax.scan(lambda c, _: (stepB(m, c), None), d, None, length=H)[0]
            field = "qacc" if what == "fd" else "qpos"
            sync = lambda out: getattr(out, field).block_until_ready()
        else:
            args = tuple(state)
            if what == "fd":
                def fn(*a):
                    return jax.vmap(lambda *w: mjx.forward(mx, fill(*w)).qacc)(*a)
            else:
                def fn(*a):  # H steps of the whole batch in one XLA program
                    d = jax.vmap(fill)(*a)
                    d = jax.lax.scan(lambda c, _: (stepB(mx, c), None), d, None, length=H)[0]
                    return d.qpos, d.qvel
            sync = lambda out: jax.block_until_ready(out)
        t0 = time.perf_counter()
        compiled = jax.jit(fn).lower(*args).compile()  # ahead of time: compile_s is compile alone
        compile_s = time.perf_counter() - t0
        out = compiled(*args)
        if what == "fd":
            qacc = out.qacc if self.io == "data" else out
            got = {"qacc": jax.device_get(qacc[:kcheck])}
        else:  # one step of the first kcheck worlds: a separate one-step program (cached by size)
            key = (id(mjm), kcheck)
            if key not in self._step1:
                def one_step(*a):  # only qpos, qvel out: XLA drops the rest of the Data
                    o = stepB(mx, jax.vmap(fill)(*a))
                    return o.qpos, o.qvel
                self._step1[key] = jax.jit(one_step)
            q1, v1 = self._step1[key](*[a[:kcheck] for a in state])
            got = {"qpos": jax.device_get(q1), "qvel": jax.device_get(v1)}

        def call():
            sync(compiled(*args))
        try:  # MJX's jacobian=auto makes M sparse from nv >= 60 (dense below) on GPU and CPU
            from mujoco.mjx._src import support
            io = "sparse M" if support.is_sparse(mjm) else "dense M"
        except Exception:  # noqa: BLE001 (private helper; only for the note)
            io = "M ?"
        io += ", " + ("whole Model and batched mjx.Data in, whole Data out" if self.io == "data" else
              "state arrays in, " + ("qacc" if what == "fd" else "qpos, qvel") +
              " out; model and Data template closed over")
        note = (f"jit(vmap(mjx.forward)), impl=jax, {io}: " + STAGES_FD) if what == "fd" else \
            (f"jit(lax.scan over {H} x vmap(mjx.step)), impl=jax, {io}: " + STAGES_STEP)
        return call, None, compile_s, got, note


class WarpPeer:
    def __init__(self, horizon, cold):
        import warp as wp
        wp.config.quiet = True
        if cold:  # an empty kernel cache: compile_s is then a cold compile, as for JAX and torch
            wp.config.kernel_cache_dir = tempfile.mkdtemp(prefix="warp-cache-")
            atexit.register(shutil.rmtree, wp.config.kernel_cache_dir, True)
        import mujoco
        import mujoco_warp as mjw
        # mujoco-warp 4.0.0's put_model recurses once per tree level (ancestor_chain): a
        # 1000-link chain passes Python's default limit of 1000
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
        wp.init()
        self.wp, self.mjw, self.mujoco, self.H = wp, mjw, mujoco, horizon
        self.dev = wp.get_preferred_device()  # cuda:0 when there is one, else cpu
        self.cuda = self.dev.is_cuda
        # kernels do not depend on nworld: the first B compiles them for the model (or loads them
        # from Warp's kernel cache on disk), later B only capture; --max-compile does not apply
        self.compile_per_batch = False

    def device(self):
        return f"{self.dev.alias}:{self.dev.name}"

    def free_bytes(self):
        return self.dev.free_memory if self.cuda else host_free_bytes()

    def build(self, mjm, what, B, x, kcheck):
        wp, mjw, np = self.wp, self.mjw, __import__("numpy")
        with wp.ScopedDevice(self.dev):
            mw = mjw.put_model(mjm)
            # no contact or constraint rows can occur: allocate one of each per world (the defaults,
            # about 48 contacts and 64 rows a world with dense rows of nv, dominate memory at large
            # B; 0 is accepted but gives a wrong mjw.step in mujoco-warp 4.0.0, forward is right)
            d = mjw.put_data(mjm, self.mujoco.MjData(mjm), nworld=B, nconmax=1, njmax=1)
            fields = [f for f in ("qpos", "qvel", "qfrc_applied", "ctrl") if x[f].size]
            saved = {f: wp.array(x[f].astype(np.float32), dtype=float) for f in fields}

            def reset():  # untimed: the step rollout advances the state in place
                for f in fields:
                    wp.copy(getattr(d, f), saved[f])
                d.time.zero_()
                wp.synchronize()

            def run_once():
                if what == "fd":
                    mjw.forward(mw, d)
                else:
                    for _ in range(self.H):
                        mjw.step(mw, d)

            reset()
            t0 = time.perf_counter()
            if what == "fd":
                mjw.forward(mw, d)  # first call: compiles/loads the kernels used
            else:
                mjw.step(mw, d)
            wp.synchronize()
            if what == "step":  # one step, called directly (the graph holds H steps)
                got = {"qpos": d.qpos.numpy()[:kcheck].copy(), "qvel": d.qvel.numpy()[:kcheck].copy()}
            # One graph per call: fd = 1 forward, step = H steps. CUDA graph on a GPU; on the CPU
            # Warp (>= 1.19) records and replays the launches too, without Python per kernel.
            reset()
            try:
                with wp.ScopedCapture(force_module_load=False) as cap:
                    run_once()
                graph, how = cap.graph, ("captured in one CUDA graph" if self.cuda else
                                         "captured in one Warp CPU graph") + ", launched"
            except Exception as e:  # noqa: BLE001 (fall back to Python calls)
                graph, how = None, f"called from Python (capture failed: {type(e).__name__})"
            compile_s = time.perf_counter() - t0

        if graph is not None:
            def call():
                wp.capture_launch(graph)
                wp.synchronize()
        else:
            def call():
                with wp.ScopedDevice(self.dev):
                    run_once()
                wp.synchronize()
        if what == "fd":  # qacc from the timed path itself
            reset()
            call()
            got = {"qacc": d.qacc.numpy()[:kcheck].copy()}
        note = (f"mjw.forward on nworld={B}, {how}: " + STAGES_FD) if what == "fd" else \
            (f"{self.H} x mjw.step on nworld={B}, {how}; state reset untimed before each call: "
             + STAGES_STEP)
        return call, (reset if what == "step" else None), compile_s, got, note


class TorchPeer:
    def __init__(self, x64, horizon):
        import mujoco
        # mujoco-torch 0.2.0 reads mujoco.mjtEnableBit.mjENBL_MULTICCD at import; MuJoCo >= 3.8
        # dropped it (4.0 has mjDSBL_MULTICCD instead). An unused bit keeps the import working.
        if not hasattr(mujoco.mjtEnableBit, "mjENBL_MULTICCD"):
            setattr(mujoco.mjtEnableBit, "mjENBL_MULTICCD", 1 << 30)
        import torch
        import mujoco_torch
        self.torch, self.mt, self.mujoco, self.H = torch, mujoco_torch, mujoco, horizon
        self.dtype = torch.float64 if x64 else torch.float32
        torch.set_default_dtype(self.dtype)
        self.dev = "cuda" if torch.cuda.is_available() else "cpu"
        self.compile_per_batch = True  # static shapes: one compile per batch size

    def device(self):
        t = self.torch
        return f"cuda:{t.cuda.get_device_name()}" if self.dev == "cuda" else "cpu"

    def free_bytes(self):
        if self.dev == "cuda":
            return self.torch.cuda.mem_get_info()[0]
        return host_free_bytes()

    def sync(self):
        if self.dev == "cuda":
            self.torch.cuda.synchronize()

    def _cast(self, obj, model):
        """float32: cast the float leaves (mujoco-torch builds float64); keep Model's side dict."""
        torch = self.torch
        if self.dtype == torch.float64:
            return obj
        out = obj.apply(lambda t: t.to(self.dtype) if t.is_floating_point() else t)
        if model:
            object.__setattr__(out, "_device_precomp", obj._device_precomp)
        return out

    def build(self, mjm, what, B, x, kcheck):
        torch, mt, H = self.torch, self.mt, self.H
        mx = self._cast(mt.device_put(mjm).to(self.dev), True)
        d1 = self._cast(mt.device_put(self.mujoco.MjData(mjm)).to(self.dev), False)
        # The whole batched Data goes in and out of each call, as in mujoco-torch's own benchmarks:
        # its kernels write into Data fields in place, so a per-world Data cannot be built inside
        # vmap from an unbatched template (what the MJX peer does by default).
        d = d1.expand(B).clone()
        for f, v in x.items():
            setattr(d, f, torch.as_tensor(v, dtype=self.dtype, device=self.dev))
        fn = mt.forward if what == "fd" else mt.step
        torch._dynamo.reset()  # a fresh compile for each B (compile_s is that compile)
        f = torch.compile(torch.vmap(lambda dd: fn(mx, dd)), fullgraph=True)
        t0 = time.perf_counter()
        out = f(d)
        if what == "step":
            # A step's output Data differs in structure from d (a sub-tensordict's batch size),
            # so feeding it back compiles once more: start the rollouts from an output instead,
            # with the state put back; then every call hits the second compiled graph.
            d = out.clone()
            for fld, v in x.items():
                setattr(d, fld, torch.as_tensor(v, dtype=self.dtype, device=self.dev))
            d.time = torch.zeros_like(d.time)
            out = f(d)
        self.sync()
        compile_s = time.perf_counter() - t0
        if what == "fd":
            got = {"qacc": out.qacc[:kcheck].cpu().numpy()}
        else:
            got = {"qpos": out.qpos[:kcheck].cpu().numpy(), "qvel": out.qvel[:kcheck].cpu().numpy()}

        if what == "fd":
            def call():
                f(d)
                self.sync()
        else:
            def call():  # H calls of the compiled vmapped step from Python, from the same start
                dd = d
                for _ in range(H):
                    dd = f(dd)
                self.sync()
        note = (f"torch.compile(vmap(mujoco_torch.forward), fullgraph=True), {self.dtype}, "
                "whole batched Data in and out: " + STAGES_FD) if what == "fd" else (
               f"{H} Python calls of torch.compile(vmap(mujoco_torch.step), fullgraph=True), "
               f"{self.dtype}, whole batched Data in and out: " + STAGES_STEP)
        return call, None, compile_s, got, note


def make_peer(peer, args):
    horizon = args.horizon
    if peer.startswith("mjx"):
        return MjxPeer(peer == "mjx64", horizon, args.mjx_io)
    if peer == "warp":
        return WarpPeer(horizon, args.warp_cold)
    return TorchPeer(peer == "torch64", horizon)


# ---------------------------------------------------------------------------------------------
# Worker: one (peer, model). Talks to the parent with lines '@row {json}' and '@msg text'.

def worker(args):
    peer = args.worker
    label, path = args.model[0].split("=", 1)
    msg = lambda s: print("@msg " + s, flush=True)
    try:
        p = make_peer(peer, args)
    except Exception as e:  # noqa: BLE001 (any import/initialisation failure skips the peer)
        msg(f"skip peer={peer} model={label}: cannot start: {type(e).__name__}: {e}")
        return 1
    batches = [int(b) for b in args.batches.split(",")]
    for what in args.what.split(","):
        mjm = load_model(path, what)
        st = make_states(mjm, args.states)
        ref = reference(mjm, st, what)
        n = mjm.nv
        too_slow = None  # set when a compile exceeded --max-compile: larger B are skipped
        for B in batches:
            head = f"peer={peer} model={label} B={B} what={what}"
            if too_slow is not None:
                msg(f"skip {head}: compile at B={too_slow[0]} took {too_slow[1]:.1f} s "
                    f"> --max-compile {args.max_compile:g} s")
                continue
            need = B * n * n * 8 * 20  # rough guard
            free = p.free_bytes()
            if free is not None and need > free:
                msg(f"skip {head}: memory guard B*nv*nv*8*20 = {need / 2**30:.1f} GiB > "
                    f"{free / 2**30:.1f} GiB free on the device")
                continue
            try:
                kcheck = min(B, args.states)
                call, before, compile_s, got, note = p.build(mjm, what, B,
                                                           inputs_for(st, what, B), kcheck)
                err, parts = check(ref, what, got)
                t, reps = median_time(call, args.budget, before)
            except Exception as e:  # noqa: BLE001 (report and go on with the next B)
                traceback.print_exc(file=sys.stdout)  # into the log
                msg(f"skip {head}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                continue
            per = t / args.horizon if what == "step" else t
            row = {"peer": peer, "model": label, "path": path, "n": n, "B": B, "what": what,
                   "us": per * 1e6, "us_call": t * 1e6, "reps": reps, "err": err, **parts,
                   "checked_states": kcheck, "compile_s": compile_s,
                   "dtype": PEERS[peer][1], "device": p.device(),
                   "horizon": args.horizon if what == "step" else None,
                   "integrator": int(mjm.opt.integrator), "timestep": float(mjm.opt.timestep),
                   "note": note}
            print("@row " + json.dumps(row), flush=True)
            if compile_s > args.max_compile and p.compile_per_batch:
                too_slow = (B, compile_s)
    return 0


# ---------------------------------------------------------------------------------------------
# Parent: checks packages and models, runs one worker per (peer, model), gathers rows.

def run_worker(args, peer, label, path, log):
    """Runs the worker, relays its lines; returns its rows. Other output goes to the log."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", peer, "--model", f"{label}={path}",
           "--batches", args.batches, "--what", args.what, "--horizon", str(args.horizon),
           "--states", str(args.states), "--budget", str(args.budget),
           "--max-compile", str(args.max_compile), "--mjx-io", args.mjx_io] + \
        (["--warp-cold"] if args.warp_cold else [])
    rows, tail = [], []
    log.write(f"==== {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # own process group: a timeout kills it all
    deadline = time.monotonic() + args.max_wall
    timer_killed = []

    def on_alarm(*_):
        timer_killed.append(True)
        os.killpg(proc.pid, signal.SIGKILL)
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(max(1, int(deadline - time.monotonic())))
    try:
        for line in proc.stdout:
            if line.startswith("@row "):
                row = json.loads(line[5:])
                rows.append(row)
                print(f"peer={row['peer']} model={row['model']} n={row['n']} B={row['B']} "
                      f"what={row['what']} us={row['us']:.4g} err={row['err']:.2g} "
                      f"compile_s={row['compile_s']:.3g}", flush=True)
            elif line.startswith("@msg "):
                print(line[5:].rstrip("\n"), flush=True)
            else:
                log.write(line)
                tail = (tail + [line.rstrip("\n")])[-15:]
        rc = proc.wait()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    if timer_killed:
        print(f"skip peer={peer} model={label}: worker killed after --max-wall {args.max_wall} s",
              flush=True)
    elif rc != 0:
        print(f"skip peer={peer} model={label}: worker exited with {rc}; last output:", flush=True)
        for line in tail:
            print("    " + line, flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", required=True, help="LABEL=PATH.xml (repeatable)")
    ap.add_argument("--batches", default="1,64,1024,4096,65536")
    ap.add_argument("--peers", default="mjx32,mjx64,warp,torch",
                    help="mjx32, mjx64, warp, torch64 (alias torch), torch32")
    ap.add_argument("--what", default="fd,step", help="fd, step or fd,step")
    ap.add_argument("--horizon", type=int, default=64, help="steps per timed step rollout")
    ap.add_argument("--states", type=int, default=32, help="seeded states, tiled to fill B")
    ap.add_argument("--budget", type=float, default=0.5, help="seconds of timed calls per row")
    ap.add_argument("--max-compile", type=float, default=120.0,
                    help="seconds; a (peer, model) compile above it skips larger B")
    ap.add_argument("--max-wall", type=float, default=3600.0,
                    help="seconds; a (peer, model) worker running longer is killed")
    ap.add_argument("--mjx-io", choices=("state", "data"), default="state",
                    help="MJX call: state arrays in / results out (default), or the whole "
                    "Model and batched Data in and out")
    ap.add_argument("--warp-cold", action="store_true",
                    help="Warp: an empty kernel cache per (model), so compile_s is a cold compile "
                    "(default: Warp's cache on disk, ~/.cache/warp, which makes reruns fast)")
    ap.add_argument("--out", default="peers_gpu.json")
    ap.add_argument("--log", default=None, help="worker output that is not a result "
                    "(compiler messages, tracebacks); default OUT.log")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    for w in args.what.split(","):
        if w not in ("fd", "step"):
            ap.error(f"--what: unknown '{w}'")
    if args.worker:
        return worker(args)

    vers = versions()
    dev = host_device()
    print(f"peers_gpu: device: {dev}")
    print("peers_gpu: versions: " + " ".join(f"{k}={v}" for k, v in vers.items()), flush=True)

    peers = []
    for p in args.peers.split(","):
        p = ALIASES.get(p.strip(), p.strip())
        if p not in PEERS:
            ap.error(f"--peers: unknown '{p}' (known: {', '.join(PEERS)}, torch)")
        miss = missing_dists(p)
        if miss:
            print(f"skip peer={p}: package(s) not installed: {', '.join(miss)}", flush=True)
        elif p not in peers:
            peers.append(p)

    models = []
    for spec in args.model:
        if "=" not in spec:
            ap.error(f"--model wants LABEL=PATH.xml, got '{spec}'")
        label, path = spec.split("=", 1)
        try:
            m = load_model(path, "fd")
            print(f"peers_gpu: model {label}: {path} nq={m.nq} nv={m.nv} nu={m.nu} "
                  f"nbody={m.nbody} integrator={m.opt.integrator} dt={m.opt.timestep:g}", flush=True)
            models.append((label, path))
        except Exception as e:  # noqa: BLE001
            print(f"skip model={label}: {type(e).__name__}: {e}", flush=True)

    rows = []
    result = {"device": dev, "versions": vers,
              "args": {k: v for k, v in vars(args).items() if k != "worker"},
              "states_seed": 1, "rows": rows}

    def save():  # after every worker, so a long run that is stopped keeps what it measured
        tmp = tempfile.NamedTemporaryFile("w", dir=os.path.dirname(os.path.abspath(args.out)),
                                          delete=False, suffix=".tmp")
        with tmp:
            json.dump(result, tmp, indent=1)
        os.replace(tmp.name, args.out)
    log_path = args.log or args.out + ".log"
    with open(log_path, "w") as log:
        for peer in peers:
            for label, path in models:
                rows += run_worker(args, peer, label, path, log)
                save()
    save()
    print(f"peers_gpu: {len(rows)} rows -> {args.out} (worker log: {log_path})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
