"""Analytical derivatives of the forward dynamics and of the step (include/chainfd_deriv.h).

    import mujoco, chainfd
    from chainfd.derivatives import Derivatives
    model = mujoco.MjModel.from_xml_path("scenes/arm7.xml")
    data = mujoco.MjData(model)
    dv = Derivatives(model)                     # device=-1: the CPU; a CUDA index for batch()
    qacc, dq, dv_, du = dv.qacc(data)           # d qacc / d(qpos, qvel, ctrl): (nv, nv), (nv, nu)
    A, B = dv.transition(data)                  # as mujoco.mjd_transitionFD's A and B
    dq, dv_, du = dv.batch(x, u)                # x (B, 2 nv), u (B, nu) -> (B, nv, nv), ..., (B, nv, nu)

Exact derivatives (no differencing step): chainfd_deriv.h says which models are taken; the rest
are refused when the Derivatives is made (ChainfdError naming the element).
"""

import ctypes

import numpy as np

from . import ChainfdError, _Handle, _library

_HOST = 0


def _functions():
    lib = _library()
    if not getattr(lib, "_deriv_ready", False):
        lib.chainfd_deriv_create.argtypes = [ctypes.c_void_p, ctypes.c_int,
                                             ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p,
                                             ctypes.c_int]
        lib.chainfd_deriv_free.argtypes = [ctypes.c_void_p]
        lib.chainfd_deriv_qacc.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p] + \
            [ctypes.c_void_p] * 4 + [ctypes.c_char_p, ctypes.c_int]
        lib.chainfd_transition_derivatives.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_char_p,
                                                                               ctypes.c_int]
        lib.chainfd_deriv_batch.argtypes = [ctypes.c_void_p, ctypes.c_int] + \
            [ctypes.c_void_p] * 5 + [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib._deriv_ready = True
    return lib


def _ptr(a):
    return None if a is None else a.ctypes.data


class Derivatives(_Handle):
    """d qacc / d(qpos, qvel, ctrl) and the step's A, B for one model; batch() on the device
    (device >= 0) or the CPU (device = -1)."""

    def __init__(self, model, device=-1):
        lib = _functions()
        self._lib, self._model = lib, model  # the model must outlive this
        if not -2**31 <= int(device) < 2**31:
            raise ValueError(f"device {device} does not fit a C int")
        self.nv, self.nu = model.nv, model.nu
        handle = ctypes.c_void_p()
        err = ctypes.create_string_buffer(1024)
        if lib.chainfd_deriv_create(model._address, int(device), ctypes.byref(handle), err, 1024):
            raise ChainfdError(1, err.value.decode())
        self._own(handle, lib.chainfd_deriv_free)

    def _check(self, code, err):
        if code:
            raise ChainfdError(1, err.value.decode("utf-8", "replace"))

    def qacc(self, data):
        """qacc (nv,) and its derivatives d/dqpos, d/dqvel (nv, nv) and d/dctrl (nv, nu) at data's
        state and controls; [i, j] = d qacc_i / d x_j."""
        nv, nu = self.nv, self.nu
        qacc, dq, dv = np.empty(nv), np.empty((nv, nv)), np.empty((nv, nv))
        du = np.empty((nv, nu))
        err = ctypes.create_string_buffer(1024)
        with self._lock:
            code = self._lib.chainfd_deriv_qacc(self._live(), self._model._address, data._address,
                                                _ptr(qacc), _ptr(dq), _ptr(dv),
                                                _ptr(du) if nu else None, err, 1024)
        self._check(code, err)
        return qacc, dq, dv, du

    def transition(self, data):
        """A (2 nv, 2 nv) and B (2 nv, nu) of one step (Euler, implicitfast or RK4) at data's
        state and controls, in mujoco.mjd_transitionFD's layout (x = (qpos tangent, qvel))."""
        nx, nu = 2 * self.nv, self.nu
        A, B = np.empty((nx, nx)), np.empty((nx, nu))
        err = ctypes.create_string_buffer(1024)
        with self._lock:
            code = self._lib.chainfd_transition_derivatives(self._live(), self._model._address,
                                                            data._address, _ptr(A),
                                                            _ptr(B) if nu else None, err, 1024)
        self._check(code, err)
        return A, B

    def batch(self, x, u=None):
        """For B states x (B, 2 nv) (chainfd_rollout's layout: qpos, qvel for hinges and slides)
        and controls u (B, nu) (None: zero): d qacc / d qpos, d qvel (B, nv, nv) and d ctrl
        (B, nv, nu), on this object's device."""
        nv, nu = self.nv, self.nu
        x = np.ascontiguousarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != 2 * nv:
            raise ValueError(f"x must be (B, {2 * nv}), got {x.shape}")
        B = x.shape[0]
        if u is not None:
            u = np.ascontiguousarray(u, dtype=np.float64)
            if u.shape != (B, nu):
                raise ValueError(f"u must be ({B}, {nu}), got {u.shape}")
        dq, dv, du = np.empty((B, nv, nv)), np.empty((B, nv, nv)), np.empty((B, nv, nu))
        err = ctypes.create_string_buffer(1024)
        with self._lock:
            code = self._lib.chainfd_deriv_batch(self._live(), B, _ptr(x), _ptr(u), _ptr(dq),
                                                 _ptr(dv), _ptr(du) if nu else None, _HOST, err,
                                                 1024)
        self._check(code, err)
        return dq, dv, du


def derivatives(model, data):
    """d qacc / d(qpos, qvel, ctrl) at data's state: (qacc, dq, dv, du), a Derivatives made for
    the call (keep one for repeated calls)."""
    d = Derivatives(model)
    try:
        return d.qacc(data)
    finally:
        d.close()
