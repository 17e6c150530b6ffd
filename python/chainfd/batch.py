"""Batched forward dynamics through chainfd_fd (include/chainfd_fd.h), with NumPy arrays.

    from chainfd.batch import ForwardDynamics
    fd = ForwardDynamics(model, backend="auto", device=0, typical_batch=4096)
    qacc = fd(qpos, qvel, qfrc)       # (B, nq), (B, nv), (B, nv) -> (B, nv)

qfrc is the total joint force MuJoCo applies (qfrc_passive + qfrc_actuator + qfrc_applied, plus
xfrc_applied mapped to joints); qacc = (M + armature)^-1 (qfrc - bias).
"""
import ctypes

import numpy as np

from . import ChainfdError, _Handle, _library


def _functions():
    lib = _library()
    if not getattr(lib, "_fd_ready", False):
        lib.chainfd_fd_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                          ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                          ctypes.c_char_p, ctypes.c_int]
        lib.chainfd_fd_run.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                       ctypes.c_char_p, ctypes.c_int]
        lib.chainfd_fd_free.argtypes = [ctypes.c_void_p]
        lib.chainfd_fd_backend.argtypes = [ctypes.c_void_p]
        lib.chainfd_fd_backend.restype = ctypes.c_char_p
        lib._fd_ready = True
    return lib


class ForwardDynamics(_Handle):
    """qacc for batches of states of one model, on the back end named (or picked by "auto")."""

    def __init__(self, model, backend="auto", device=0, typical_batch=1):
        lib = _functions()
        self._lib, self._model = lib, model
        self.nq, self.nv = model.nq, model.nv
        for name, value in (("device", device), ("typical_batch", typical_batch)):
            if not -2**31 <= int(value) < 2**31:  # C ints
                raise ValueError(f"{name} {value} does not fit a C int")
        handle = ctypes.c_void_p()
        err = ctypes.create_string_buffer(1024)
        if lib.chainfd_fd_create(model._address, backend.encode(), device, typical_batch,
                                 ctypes.byref(handle), err, 1024):
            raise ChainfdError(1, err.value.decode())
        self._own(handle, lib.chainfd_fd_free)

    @property
    def backend(self):
        with self._lock:
            return self._lib.chainfd_fd_backend(self._live()).decode()

    def __call__(self, qpos, qvel, qfrc):
        qpos = np.ascontiguousarray(np.atleast_2d(qpos), dtype=np.float64)
        qvel = np.ascontiguousarray(np.atleast_2d(qvel), dtype=np.float64)
        qfrc = np.ascontiguousarray(np.atleast_2d(qfrc), dtype=np.float64)
        B = qpos.shape[0]
        if qpos.shape != (B, self.nq) or qvel.shape != (B, self.nv) or qfrc.shape != (B, self.nv):
            raise ValueError(f"expected ({B}, {self.nq}), ({B}, {self.nv}), ({B}, {self.nv})")
        if not 1 <= B < 2**31:  # a C int
            raise ValueError(f"need 1 <= B < 2^31 states, got {B}")
        qacc = np.empty((B, self.nv))
        err = ctypes.create_string_buffer(1024)
        with self._lock:
            code = self._lib.chainfd_fd_run(self._live(), B, qpos.ctypes.data, qvel.ctypes.data,
                                            qfrc.ctypes.data, qacc.ctypes.data, err, 1024)
        if code:
            raise ChainfdError(1, err.value.decode())
        return qacc
