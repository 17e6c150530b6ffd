"""chainfd from Python: load the MuJoCo plugin library and step through chainfd.

    import mujoco, chainfd
    chainfd.load()                                   # registers the "chainfd" plugin with MuJoCo
    model = mujoco.MjModel.from_xml_path("arm.xml")  # a model declaring <plugin plugin="chainfd">
    data = mujoco.MjData(model)
    chainfd.step(model, data)                        # instead of mujoco.mj_step(model, data)

step() and forward() are drop-in replacements for mujoco.mj_step / mujoco.mj_forward (see
include/chainfd.h for what they compute and when they hand a step to MuJoCo); they raise
ChainfdError with chainfd's message when the configuration is invalid or, with fallback=error,
when chainfd cannot step the model or state exactly. They release the GIL while they run, so
several threads may step their own MjData of one model at once.
"""

import ctypes
import os
import threading

__all__ = ["ChainfdError", "plugin_path", "load", "step", "forward", "stats", "gpu_count"]

_LIBRARY_NAME = "libchainfd_plugin.so"
_lock = threading.Lock()
_lib = None


class ChainfdError(RuntimeError):
    """chainfd_step / chainfd_forward returned an error; the message says why."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def _candidates():
    env = os.environ.get("CHAINFD_PLUGIN_PATH")
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, _LIBRARY_NAME)  # a copy installed next to the package
    repo = os.path.dirname(os.path.dirname(here))  # python/chainfd -> the repository
    yield os.path.join(repo, "build", "plugin", _LIBRARY_NAME)


def plugin_path():
    """Path of libchainfd_plugin.so: $CHAINFD_PLUGIN_PATH, a copy beside this package, or the
    repository's build/plugin/ (for `pip install -e python` or PYTHONPATH=python)."""
    tried = []
    for path in _candidates():
        if os.path.isfile(path):
            return path
        tried.append(path)
    raise FileNotFoundError(
        "chainfd plugin library not found (build it: cmake --build build; or set "
        "CHAINFD_PLUGIN_PATH); tried: " + ", ".join(tried))


class _Stats(ctypes.Structure):
    _fields_ = [
        ("steps_chainfd", ctypes.c_longlong),
        ("steps_mujoco", ctypes.c_longlong),
        ("refusals", ctypes.c_longlong),
        ("backend", ctypes.c_char_p),
        ("last_fallback", ctypes.c_char_p),
    ]


def load(path=None):
    """Load the plugin library into MuJoCo (mujoco.mj_loadPluginLibrary) once per process and
    return the path loaded. Call it before compiling a model that declares the plugin."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib._name
        import mujoco

        path = os.path.abspath(path or plugin_path())
        mujoco.mj_loadPluginLibrary(path)
        # the same file: dlopen returns the handle MuJoCo opened, so one registration, one state
        lib = ctypes.CDLL(path)
        for name in ("chainfd_step", "chainfd_forward"):
            fn = getattr(lib, name)
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            fn.restype = ctypes.c_int
        lib.chainfd_last_error.argtypes = []
        lib.chainfd_last_error.restype = ctypes.c_char_p
        lib.chainfd_get_stats.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(_Stats)]
        lib.chainfd_get_stats.restype = ctypes.c_int
        lib.chainfd_gpu_count.argtypes = []
        lib.chainfd_gpu_count.restype = ctypes.c_int
        _lib = lib
        return path


def _library():
    if _lib is None:
        load()
    return _lib


def _call(fn, model, data):
    lib = _library()
    code = getattr(lib, fn)(model._address, data._address)
    if code:
        raise ChainfdError(code, lib.chainfd_last_error().decode("utf-8", "replace"))


def step(model, data):
    """One step, as mujoco.mj_step(model, data), with chainfd's forward dynamics."""
    _call("chainfd_step", model, data)


def forward(model, data):
    """Forward dynamics, as mujoco.mj_forward(model, data), with chainfd's qacc."""
    _call("chainfd_forward", model, data)


def stats(model, data):
    """Counters of data's chainfd instance: steps by chainfd and by MuJoCo, refusals, the back end,
    and the reason of the last fallback."""
    lib = _library()
    out = _Stats()
    code = lib.chainfd_get_stats(model._address, data._address, ctypes.byref(out))
    if code:
        raise ChainfdError(code, "the model declares no chainfd plugin instance")
    return {
        "steps_chainfd": out.steps_chainfd,
        "steps_mujoco": out.steps_mujoco,
        "refusals": out.refusals,
        "backend": (out.backend or b"").decode(),
        "last_fallback": (out.last_fallback or b"").decode("utf-8", "replace"),
    }


def gpu_count():
    """How many CUDA devices chainfd's GPU back ends can use here (0 in a build without CUDA or
    on a machine without a device)."""
    return _library().chainfd_gpu_count()


class _Handle:
    """A C handle (chainfd_fd, chainfd_rollout) owned by one Python object: its calls take turns
    under a lock (the C side's buffers serve one thread; its calls release the GIL), a closed one
    raises instead of reaching C with NULL, and it cannot be copied (a copy would share the handle,
    freed by whichever closes first). Subclasses call _own(handle, free) once the handle is made,
    free being the C function that frees it."""

    _handle = None  # (one that failed to be made has nothing to free)
    _lock = None

    def _own(self, handle, free):
        self._lock, self._free = threading.Lock(), free
        self._handle = handle

    def _live(self):
        if not self._handle:
            raise ValueError(f"this {type(self).__name__} is closed")
        return self._handle

    def close(self):
        if self._lock is None:
            return
        with self._lock:
            if self._handle:
                self._free(self._handle)
                self._handle = None

    __del__ = close

    def __copy__(self):
        raise TypeError(f"a {type(self).__name__} cannot be copied: make another")

    __deepcopy__ = __reduce__ = lambda self, *args: self.__copy__()
