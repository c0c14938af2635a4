"""diloco: a Python trainer joins a Decoupled DiLoCo run as a learner, or hosts its syncer.

A thin ctypes binding of libdiloco's embedding API (rt/include/diloco/client.h; the guide
is docs/embedding.md).  The parameters stay the caller's: numpy arrays or PyTorch CPU
tensors of float32, contiguous, passed by pointer, never copied by this module::

    import numpy as np, diloco
    params = {"fc.0.weight": np.zeros((64, 784), np.float32), ...}   # in the model's order
    learner = diloco.Learner(params, connect="10.0.0.1:7070", secret_file="secret",
                             run={"sync": {"preset": "decoupled", "H": 24}})
    for batch in data:
        my_inner_step(params, batch)          # the caller's forward, backward, optimizer
        learner.step_done(tokens=len(batch))  # merged fragments land in params here
    learner.finish()

The library writes into the arrays only inside ``Learner(...)``, ``step_done``,
``rollback`` and ``finish``.  Errors raise ``diloco.Error`` with the library's message.
The shared library is found through ``DILOCO_LIB`` (a path to libdiloco.so), next to an
installed package (PREFIX/lib), in a source checkout's ``build/``, or on the system's
library path.
"""

import ctypes
import ctypes.util
import json
import os
import sys

__all__ = ["Error", "Learner", "Server", "library_path"]


class Error(RuntimeError):
    """An error of libdiloco: the message names what was wrong and what was expected."""


# ---- the library ----

def _candidates():
    env = os.environ.get("DILOCO_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    try:  # installed: PREFIX/lib/python3/dist-packages/diloco, the library in PREFIX/LIBDIR
        from . import _libdir
        prefix = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(here))))
        for name in ("libdiloco.so", "libdiloco.so.0"):
            yield os.path.join(prefix, _libdir.LIBDIR, name)
    except ImportError:  # a source checkout has no _libdir.py
        pass
    # a source checkout: python/diloco -> build/
    root = os.path.dirname(os.path.dirname(here))
    yield os.path.join(root, "build", "libdiloco.so")
    found = ctypes.util.find_library("diloco")
    if found:
        yield found


def library_path():
    """The libdiloco.so this module loads (the first that exists of the places above)."""
    tried = []
    for c in _candidates():
        if os.path.sep not in c or os.path.exists(c):
            return c
        tried.append(c)
    raise Error("libdiloco.so not found (tried %s): set DILOCO_LIB to its path" % ", ".join(tried))


_lib = None


class _Tensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("data", ctypes.c_void_p), ("numel", ctypes.c_int64),
                ("ndim", ctypes.c_int), ("shape", ctypes.POINTER(ctypes.c_int64))]


# int (*)(void *ctx, const char *path, int64_t step): client.h's save_state, load_state
_StateFn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64)


# client.h's config structs as of version 3 (DLC_CLIENT_CONFIG_V3: the fields are version
# 1's, and learner ids count from 1 as `diloco-lua learner --id` counts them) and 4
# (DLC_SERVER_CONFIG_V4: version 3's and a shard of a syncer in shards, docs/shards.md)
# and 5 (DLC_SERVER_CONFIG_V5: version 4's and a standby, docs/shards.md "Standbys"):
# this module passes those versions, so a newer libdiloco reads only these fields.
_CONFIG_VERSION = 3
_SERVER_CONFIG_VERSION = 5


class _ClientConfig(ctypes.Structure):
    _fields_ = [("tensors", ctypes.POINTER(_Tensor)), ("count", ctypes.c_int), ("run", ctypes.c_char_p),
                ("run_params", ctypes.c_void_p), ("connect", ctypes.c_char_p), ("secret_file", ctypes.c_char_p),
                ("secret", ctypes.c_char_p), ("run_id", ctypes.c_char_p), ("id", ctypes.c_int),
                ("join_timeout", ctypes.c_double), ("wait_timeout", ctypes.c_double), ("heartbeat", ctypes.c_double),
                ("state_dir", ctypes.c_char_p), ("save_state", _StateFn), ("load_state", _StateFn),
                ("state_ctx", ctypes.c_void_p), ("save_every", ctypes.c_int64),
                ("driver", ctypes.c_void_p)]  # must be NULL (client.h: driver mode was removed)


class _ServerEvent(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("learner", ctypes.c_int), ("fragment", ctypes.c_int),
                ("version", ctypes.c_int64), ("time", ctypes.c_double), ("text", ctypes.c_char * 256)]


# void (*)(void *ctx, const dlc_server_event *ev): client.h's on_event
_EventFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(_ServerEvent))


class _ServerConfig(ctypes.Structure):
    _fields_ = [("tensors", ctypes.POINTER(_Tensor)), ("count", ctypes.c_int), ("run", ctypes.c_char_p),
                ("run_params", ctypes.c_void_p), ("learners", ctypes.c_int), ("listen", ctypes.c_char_p),
                ("secret_file", ctypes.c_char_p), ("secret", ctypes.c_char_p), ("run_id", ctypes.c_char_p),
                ("timeout", ctypes.c_double), ("heartbeat", ctypes.c_double), ("on_event", _EventFn),
                ("event_ctx", ctypes.c_void_p), ("event_thread", ctypes.c_int),
                ("driver", ctypes.c_void_p),  # must be NULL (client.h: driver mode was removed)
                ("shard", ctypes.c_int), ("shards", ctypes.c_int),  # version 4
                ("standby_of", ctypes.c_char_p), ("lease", ctypes.c_double)]  # version 5



def _load():
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(library_path())
    P, I, D, I64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_double, ctypes.c_int64
    sigs = {
        "dlc_last_error": (ctypes.c_char_p, []),
        "dlc_client_config_default_versioned": (I, [I, ctypes.POINTER(_ClientConfig)]),
        "dlc_client_new_versioned": (P, [I, ctypes.POINTER(_ClientConfig)]),
        "dlc_client_free": (None, [P]),
        "dlc_client_step": (I, [P, I64]),
        "dlc_client_rollback": (I, [P]),
        "dlc_client_finish": (I, [P, D]),
        "dlc_client_id": (I, [P]),
        "dlc_client_steps": (I64, [P]),
        "dlc_client_applied": (I64, [P]),
        "dlc_client_schedule_step": (I64, [P]),
        "dlc_server_config_default_versioned": (I, [I, ctypes.POINTER(_ServerConfig)]),
        "dlc_server_new_versioned": (P, [I, ctypes.POINTER(_ServerConfig)]),
        "dlc_server_free": (None, [P]),
        "dlc_server_port": (I, [P]),
        "dlc_server_poll": (I, [P, ctypes.POINTER(_ServerEvent), I]),
        "dlc_server_dispatch": (I, [P, I]),
        "dlc_server_global": (I, [P, ctypes.POINTER(_Tensor), I]),
        "dlc_server_event_name": (ctypes.c_char_p, [I]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    _lib = lib
    return lib


def _fail(what):
    raise Error("%s: %s" % (what, _load().dlc_last_error().decode("utf-8", "replace")))


# ---- parameters: numpy arrays or torch tensors, by pointer ----

def _pointer_and_shape(name, a):
    """The address, element count and shape of a float32 contiguous CPU buffer."""
    if hasattr(a, "data_ptr") and hasattr(a, "is_contiguous"):  # a torch.Tensor
        if str(a.dtype) != "torch.float32":
            raise Error("parameter %r: dtype %s: expected torch.float32" % (name, a.dtype))
        if a.device.type != "cpu":
            raise Error("parameter %r: on %s: expected a CPU tensor" % (name, a.device))
        if not a.is_contiguous():
            raise Error("parameter %r: not contiguous: expected a contiguous tensor (.contiguous())" % name)
        return a.data_ptr(), a.numel(), tuple(a.shape)
    iface = getattr(a, "__array_interface__", None)
    if iface is None:
        raise Error("parameter %r: a %s: expected a numpy array or a torch tensor of float32" % (name, type(a).__name__))
    if iface["typestr"] != "<f4":
        raise Error("parameter %r: dtype %s: expected float32" % (name, iface["typestr"]))
    if iface.get("strides") is not None:
        raise Error("parameter %r: not C-contiguous: expected a contiguous array (np.ascontiguousarray)" % name)
    ptr, readonly = iface["data"]
    if readonly:
        raise Error("parameter %r: read-only: the library writes merged fragments into it" % name)
    n = 1
    for d in iface["shape"]:
        n *= d
    return ptr, n, tuple(iface["shape"])


class _Layout:
    """The C tensor list for params (a dict in order, or a list of (name, array))."""

    def __init__(self, params):
        items = list(params.items()) if hasattr(params, "items") else list(params)
        if not items:
            raise Error("params: empty: expected the model's parameters, name -> float32 array, in order")
        self.keep = items  # the arrays must outlive the C side's use of their memory
        self.arr = (_Tensor * len(items))()
        self.shapes = []
        for i, (name, a) in enumerate(items):
            if not isinstance(name, str) or not name:
                raise Error("params: item %d: expected a non-empty name, got %r" % (i, name))
            ptr, n, shape = _pointer_and_shape(name, a)
            if n < 1:
                raise Error("parameter %r: empty: expected at least one element" % name)
            dims = (ctypes.c_int64 * max(1, len(shape)))(*shape) if shape else (ctypes.c_int64 * 1)(1)
            self.shapes.append(dims)
            t = self.arr[i]
            t.name, t.data, t.numel = name.encode(), ptr, n
            t.ndim, t.shape = (len(shape), dims) if 1 <= len(shape) <= 4 else (0, None)
        self.count = len(items)


def _run_text(run):
    if run is None:
        return None
    if isinstance(run, str):
        return run.encode()
    return json.dumps(run).encode()


class _Handle:
    """A library object freed by close(), at the end of a with block, or when collected."""

    _h = None
    _free = None  # the name of the library's free function

    def close(self):
        if self._h is not None:
            getattr(_lib, self._free)(self._h)
            self._h = None

    def _config(self, cfg, params, run, secret_file, secret):
        """The fields a client's and a server's config share: the layout, the run, the secret
        (the layout and run text are kept on self: the config borrows them)."""
        self._layout = _Layout(params)
        cfg.tensors, cfg.count = self._layout.arr, self._layout.count
        self._run = _run_text(run)
        cfg.run = self._run
        cfg.secret_file = secret_file.encode() if secret_file is not None else None
        cfg.secret = secret.encode() if secret is not None else None
        return cfg

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _state_call(fn, name):
    """A Python callable as client.h's state callback: 0 when it returns, 1 when it raises
    (the exception printed to stderr; the library then names the failed save or load)."""
    def call(ctx, path, step):
        try:
            fn(os.fsdecode(path), int(step))
            return 0
        except Exception as e:  # a callback must not raise through C
            sys.stderr.write("diloco.Learner: %s raised %s: %s\n" % (name, type(e).__name__, e))
            return 1
    return call


class Learner(_Handle):
    """One learner of a run on the caller's parameters (docs/embedding.md).

    params: the model's parameters in order, a dict name -> array (or a list of pairs),
    float32 contiguous numpy arrays or CPU torch tensors, shaped as every learner of the
    run has them.  connect: "HOST:PORT" of the syncer, or "@FILE" (its address file).
    secret_file or secret: the run's secret.  run: the run's sync and outer fields, a dict
    or JSON text ({"sync": {"preset": "decoupled", "H": 24}, "outer": {"lr": 0.7}}).
    id: the learner id, from 1 (as `diloco-lua learner --id` and the metrics number them);
    None: the syncer assigns one.  Joins at once: the arrays then hold the global model.

    The caller's own state for a restart (its optimizer's moments): with state_dir, the
    library calls save_state(path, step) every save_every steps (0: only at finish) and
    at finish, the caller writes one file at path (torch.save(opt.state_dict(), path)),
    and the library publishes it whole; a Learner made again with the same state_dir
    calls load_state(path, step) with the newest after its join; a state another run or
    another id wrote is refused (its checkpoint names its learner and run).  An
    exception in a callback fails the call it ran in (the state published before stays)."""

    _free = "dlc_client_free"

    def __init__(self, params, connect, secret_file=None, secret=None, run=None, run_id=None, id=None,
                 join_timeout=60.0, wait_timeout=300.0, heartbeat=1.0, state_dir=None, save_state=None,
                 load_state=None, save_every=0):
        lib = _load()
        cfg = _ClientConfig()
        if lib.dlc_client_config_default_versioned(_CONFIG_VERSION, ctypes.byref(cfg)) != 0:
            _fail("diloco.Learner")
        cfg = self._config(cfg, params, run, secret_file, secret)
        cfg.connect = connect.encode()
        cfg.run_id = run_id.encode() if run_id is not None else None
        cfg.id = 0 if id is None else int(id)
        cfg.join_timeout, cfg.wait_timeout, cfg.heartbeat = join_timeout, wait_timeout, heartbeat
        self._state_fns = []  # kept alive as long as the client may call them
        if state_dir is not None:
            cfg.state_dir = os.fsencode(state_dir)
            cfg.save_every = int(save_every)
        for name, fn in (("save_state", save_state), ("load_state", load_state)):
            if fn is not None:
                cb = _StateFn(_state_call(fn, name))
                self._state_fns.append(cb)
                setattr(cfg, name, cb)
        self._h = lib.dlc_client_new_versioned(_CONFIG_VERSION, ctypes.byref(cfg))
        if not self._h:
            _fail("diloco.Learner")

    def _check(self, st, what):
        if st != 0:
            _fail("diloco.Learner." + what)

    def step_done(self, tokens):
        """After each inner step, with the tokens it consumed: merged fragments land in the
        parameters here; in a blocking preset (diloco) it waits here for the round."""
        if self._h is None:
            raise Error("diloco.Learner.step_done: the learner is closed")
        self._check(_lib.dlc_client_step(self._h, int(tokens)), "step_done")

    def rollback(self):
        """A non-finite loss on the caller's side: the parameters go back to the last global model."""
        self._check(_lib.dlc_client_rollback(self._h), "rollback")

    def finish(self, timeout=30.0):
        """The end: what it trained since its last sends goes out, its contributions come back
        merged (into the parameters), then it says BYE."""
        if self._h is not None:
            self._check(_lib.dlc_client_finish(self._h, float(timeout)), "finish")

    @property
    def id(self):
        """The learner id, from 1 as `diloco-lua learner --id` numbers them (the syncer's
        choice when the Learner was made without one)."""
        return _lib.dlc_client_id(self._h)

    @property
    def steps(self):
        return _lib.dlc_client_steps(self._h)

    @property
    def schedule_step(self):
        """The run's step this learner is at (its steps plus those skipped catching up with
        the others' rounds): what a learning-rate schedule follows."""
        return _lib.dlc_client_schedule_step(self._h)

    @property
    def applied(self):
        """Merged fragments written into the parameters so far."""
        return _lib.dlc_client_applied(self._h)


def _event_dict(ev):
    return {"kind": _lib.dlc_server_event_name(ev.kind).decode(), "learner": ev.learner,
            "fragment": ev.fragment, "version": ev.version, "time": ev.time,
            "text": ev.text.decode("utf-8", "replace")}


class Server(_Handle):
    """A run's syncer on a thread of the library; params give the layout and the initial
    global model (copied), learners the learner count M; shard (from 1) of shards: one shard
    of a syncer split by fragment (docs/shards.md), whose learners connect to every shard
    ("HOST:PORT,HOST:PORT"); standby_of ("HOST:PORT"): a standby of the syncer (or shard)
    there, which takes over once it has not reached it for lease seconds (0: timeout), its
    learners given both addresses ("A|A2"; docs/shards.md, "Standbys").

    Its events (dicts, as poll returns them) come from poll, or go to on_event(event):
    called by dispatch(timeout) in the caller's own loop, or with event_thread=True from a
    thread of the library's (ctypes takes the GIL for it) until close.  An exception in
    on_event is printed to stderr and the next event still comes."""

    _free = "dlc_server_free"

    def __init__(self, params, learners, secret_file=None, secret=None, run=None, run_id="", listen="127.0.0.1:0",
                 timeout=5.0, heartbeat=1.0, on_event=None, event_thread=False, shard=1, shards=1,
                 standby_of=None, lease=0.0):
        lib = _load()
        cfg = _ServerConfig()
        if lib.dlc_server_config_default_versioned(_SERVER_CONFIG_VERSION, ctypes.byref(cfg)) != 0:
            _fail("diloco.Server")
        cfg = self._config(cfg, params, run, secret_file, secret)
        cfg.learners = int(learners)
        cfg.listen = listen.encode()
        cfg.run_id = run_id.encode()
        cfg.timeout, cfg.heartbeat = timeout, heartbeat
        cfg.shard, cfg.shards = int(shard), int(shards)  # shard (from 1) of shards: docs/shards.md
        self._standby_of = standby_of.encode() if standby_of else None  # (borrowed by the call)
        cfg.standby_of, cfg.lease = self._standby_of, float(lease)
        self._on_event = None
        if on_event is not None:
            def call(ctx, ev):
                try:
                    on_event(_event_dict(ev.contents))
                except Exception as e:  # a callback must not raise through C
                    sys.stderr.write("diloco.Server: on_event raised %s: %s\n" % (type(e).__name__, e))
            self._on_event = _EventFn(call)  # kept alive as long as the server may call it
            cfg.on_event, cfg.event_thread = self._on_event, int(bool(event_thread))
        self._h = lib.dlc_server_new_versioned(_SERVER_CONFIG_VERSION, ctypes.byref(cfg))
        if not self._h:
            _fail("diloco.Server")

    def dispatch(self, timeout=0.0):
        """With on_event (and not event_thread): waits up to timeout s for an event, then calls
        on_event for it and every other one ready; returns how many."""
        got = _lib.dlc_server_dispatch(self._h, int(timeout * 1000))
        if got < 0:
            _fail("diloco.Server.dispatch")
        return got

    @property
    def port(self):
        return _lib.dlc_server_port(self._h)

    def poll(self, timeout=1.0):
        """The next event as a dict (kind: merged, joined, lost, rejected, refused, bye,
        replaced, refusals, behind, standby: rt/include/diloco/rt.h; learner, fragment, version,
        time, text), or None when none came within timeout s."""
        ev = _ServerEvent()
        got = _lib.dlc_server_poll(self._h, ctypes.byref(ev), int(timeout * 1000))
        if got < 0:
            _fail("diloco.Server.poll")
        if got == 0:
            return None
        return _event_dict(ev)

    def global_model(self, params):
        """The global model into params (the server's layout)."""
        lay = _Layout(params)
        if _lib.dlc_server_global(self._h, lay.arr, lay.count) != 0:
            _fail("diloco.Server.global_model")

