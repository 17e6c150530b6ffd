"""Batched rollouts through chainfd_rollout (include/chainfd_rollout.h), with NumPy arrays.

    import mujoco, chainfd
    from chainfd.rollout import Rollout
    model = mujoco.MjModel.from_xml_path("scenes/arm7.xml")
    r = Rollout(model, device=0)           # a CUDA device, or device=-1 for the CPU
    x0 = r.state(mujoco.MjData(model))     # [qpos; qvel]
    traj = r.run(x0, ctrl)                 # ctrl: (B, H, nu) -> (B, H+1, 2n)

Every step has mj_step's semantics for the models chainfd_rollout accepts; anything else is
refused when the Rollout is made, with the reason (ChainfdError). That includes mj_step's bad-state
handling: an instance whose state, acceleration or control turns NaN or past 1e10 gets MuJoCo's
warning and reset, the others run on; warnings() says which were reset (a sampler drops them).

Chains longer than MuJoCo compiles (its body trees stop at depth 1023): Rollout(model, links=N)
extends the model's chain to N links, link 0 kept and links 1 .. n-1 repeated after it
(chainfd_rollout_create_extended); state(data) then gives each link its model joint's value, and
link_poses(qpos) the links' world positions and rotations.
"""

import ctypes

import numpy as np

from . import ChainfdError, _Handle, _library

_HOST = 0


def _functions():
    lib = _library()
    if not getattr(lib, "_rollout_ready", False):
        lib.chainfd_rollout_create.argtypes = [ctypes.c_void_p, ctypes.c_int,
                                               ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p,
                                               ctypes.c_int]
        lib.chainfd_rollout_run.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                            ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                            ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                            ctypes.c_char_p, ctypes.c_int]
        lib.chainfd_rollout_free.argtypes = [ctypes.c_void_p]
        lib.chainfd_rollout_last_kernel_ms.argtypes = [ctypes.c_void_p]
        lib.chainfd_rollout_last_kernel_ms.restype = ctypes.c_double
        lib.chainfd_rollout_warnings.argtypes = [ctypes.c_void_p]
        lib.chainfd_rollout_warnings.restype = ctypes.c_long
        lib.chainfd_rollout_instance_warnings.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                                          ctypes.c_char_p, ctypes.c_int]
        lib.chainfd_host_alloc.argtypes = [ctypes.c_size_t]
        lib.chainfd_host_alloc.restype = ctypes.c_void_p
        lib.chainfd_host_free.argtypes = [ctypes.c_void_p]
        lib.chainfd_rollout_create_extended.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                                        ctypes.POINTER(ctypes.c_void_p),
                                                        ctypes.c_char_p, ctypes.c_int]
        lib.chainfd_rollout_links.argtypes = [ctypes.c_void_p]
        lib.chainfd_rollout_links.restype = ctypes.c_int
        lib.chainfd_rollout_link_dof.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.chainfd_rollout_link_dof.restype = ctypes.c_int
        lib.chainfd_rollout_link_poses.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                                   ctypes.c_void_p, ctypes.c_void_p]
        lib.chainfd_rollout_get_state.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.chainfd_rollout_set_state.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib._rollout_ready = True
    return lib


class Rollout(_Handle):
    """B rollouts of H steps of one model, on a GPU (device >= 0) or the CPU (device = -1); with
    links, of the model's chain extended to that many links."""

    def __init__(self, model, device=0, links=None):
        lib = _functions()
        self._lib, self._model = lib, model  # the model must outlive the rollout
        self.nu = model.nu
        for name, value in (("device", device), ("links", 0 if links is None else links)):
            if not -2**31 <= int(value) < 2**31:  # C ints
                raise ValueError(f"{name} {value} does not fit a C int")
        handle = ctypes.c_void_p()
        err = ctypes.create_string_buffer(1024)
        if links is None:
            code = lib.chainfd_rollout_create(model._address, device, ctypes.byref(handle), err, 1024)
        else:
            code = lib.chainfd_rollout_create_extended(model._address, int(links), device,
                                                       ctypes.byref(handle), err, 1024)
        if code:
            raise ChainfdError(1, err.value.decode())
        self._own(handle, lib.chainfd_rollout_free)
        self.links = lib.chainfd_rollout_links(handle)  # the state is [qpos (links); qvel (links)]
        self.nq = self.nv = self.links
        self._dof = np.array([lib.chainfd_rollout_link_dof(handle, i) for i in range(self.links)])
        self._extended = links is not None


    def state(self, data):
        """The rollout state [qpos; qvel] of an MjData: per dof, a hinge's or slide's qpos, a free
        joint's position, a ball's or free joint's orientation as the rotation vector of its
        quaternion (chainfd_rollout_get_state; an extended chain: each link the value of the model
        joint it repeats)."""
        if not self._extended:
            x = np.empty(2 * self.links)
            self._lib.chainfd_rollout_get_state(self._model._address, data._address, x.ctypes.data)
            return x
        qpos = data.qpos[self._model.jnt_qposadr[self._model.dof_jntid[self._dof]]]
        return np.concatenate([qpos, data.qvel[self._dof]])

    def set_state(self, data, x):
        """Sets an MjData's qpos and qvel from a rollout state (not for an extended chain)."""
        if self._extended:
            raise ValueError("an extended chain's state has no MjData of its model")
        x = np.ascontiguousarray(x, dtype=np.float64)
        if x.shape != (2 * self.links,):
            raise ValueError(f"x must be ({2 * self.links},), got {x.shape}")
        self._lib.chainfd_rollout_set_state(self._model._address, data._address, x.ctypes.data)

    def link_poses(self, qpos):
        """The links' world poses at positions qpos (links,): xpos (links, 3) and xmat
        (links, 3, 3), as MuJoCo's data.xpos, data.xmat of the link bodies."""
        qpos = np.ascontiguousarray(qpos, dtype=np.float64)
        if qpos.shape != (self.links,):
            raise ValueError(f"qpos must be ({self.links},), got {qpos.shape}")
        xpos, xmat = np.empty((self.links, 3)), np.empty((self.links, 3, 3))
        with self._lock:
            self._lib.chainfd_rollout_link_poses(self._live(), qpos.ctypes.data, xpos.ctypes.data,
                                                 xmat.ctypes.data)
        return xpos, xmat

    def pinned(self, shape):
        """A float64 array of `shape` in page-locked host memory (chainfd_host_alloc), freed with
        the array: ctrl and out arrays there cross to and from the GPU at the bus's full speed."""
        return pinned_empty(self._lib, shape)

    def run(self, init, ctrl, final_only=False, out=None):
        """init: (2n,) shared by every rollout, or (B, 2n); ctrl: (B, H, nu).
        Returns (B, H+1, 2n) states (the initial one first), or (B, 2n) with final_only; written
        into `out` when given (a C-contiguous float64 array of that shape, e.g. from pinned())."""
        shape = np.shape(ctrl)  # (checked before any copy)
        if len(shape) != 3 or shape[2] != self.nu:
            raise ValueError(f"ctrl must be (B, H, {self.nu}), got {shape}")
        B, H = shape[0], shape[1]
        if not (1 <= B < 2**31 and 0 <= H < 2**31):  # C ints
            raise ValueError(f"need 1 <= B < 2^31 and 0 <= H < 2^31, got B={B}, H={H}")
        ctrl = np.ascontiguousarray(ctrl, dtype=np.float64)
        init = np.ascontiguousarray(init, dtype=np.float64)
        nx = self.nq + self.nv
        shared = init.ndim == 1
        if init.shape != ((nx,) if shared else (B, nx)):
            raise ValueError(f"init must be ({nx},) or ({B}, {nx}), got {init.shape}")
        shape = (B, nx) if final_only else (B, H + 1, nx)
        if out is None:
            out = np.empty(shape)
        elif (out.shape != shape or out.dtype != np.float64 or not out.flags.c_contiguous
              or not out.flags.writeable):
            raise ValueError(f"out must be a writeable C-contiguous float64 array of shape {shape}")
        err = ctypes.create_string_buffer(1024)
        with self._lock:
            code = self._lib.chainfd_rollout_run(self._live(), B, H, init.ctypes.data, int(shared),
                                                 ctrl.ctypes.data, out.ctypes.data,
                                                 int(final_only), _HOST, err, 1024)
            self._last_B = 0 if code else B  # a failed run reports no warnings
        if code:
            raise ChainfdError(code, err.value.decode())
        return out

    def warnings(self):
        """The last run's bad-state warnings per instance (int32, shape (B,)): how many times
        mj_step would have warned (bad qpos, qvel or qacc: a reset with autoreset; bad ctrl: the
        step's controls zeroed).
        Zero for every instance in a sound run (the total alone: total_warnings())."""
        err = ctypes.create_string_buffer(1024)
        with self._lock:
            counts = np.zeros(getattr(self, "_last_B", 0), dtype=np.int32)
            if counts.size and self._lib.chainfd_rollout_instance_warnings(
                    self._live(), counts.ctypes.data, err, 1024):
                raise ChainfdError(1, err.value.decode())
        return counts

    def total_warnings(self):
        """The last run's bad-state warnings over every instance (no copy from the device)."""
        with self._lock:
            return self._lib.chainfd_rollout_warnings(self._live())

    def last_kernel_ms(self):
        with self._lock:
            return self._lib.chainfd_rollout_last_kernel_ms(self._live())


class _Pinned:
    """Owns one chainfd_host_alloc block; the arrays viewing it keep it alive."""

    def __init__(self, lib, nbytes):
        self._lib = lib
        self.ptr = lib.chainfd_host_alloc(ctypes.c_size_t(max(nbytes, 1)))
        if not self.ptr:
            raise MemoryError(f"chainfd_host_alloc({nbytes}) failed")

    def __del__(self):
        if self.ptr:
            self._lib.chainfd_host_free(ctypes.c_void_p(self.ptr))
            self.ptr = None


def pinned_empty(lib, shape):
    count = int(np.prod(shape))
    block = _Pinned(lib, 8 * count)
    buf = (ctypes.c_double * max(count, 1)).from_address(block.ptr)
    buf._owner = block  # the ctypes buffer holds the block; the array holds the buffer
    return np.frombuffer(buf, dtype=np.float64, count=count).reshape(shape)
