"""EnvPool's ``xla()`` on shmatari pools: ``send`` / ``recv`` / ``step`` as
XLA custom calls that run inside ``jax.jit`` and ``jax.lax.scan`` (CPU).

``handle, recv, send, step = pool.xla()`` (:meth:`shmatari.ShmVectorEnv.xla`,
:meth:`shmatari.envpool.EnvPoolAdapter.xla`) gives EnvPool's contract
(``envpool/python/lax.py``, ``xla_template.py``), which CleanRL's
``ppo_atari_envpool_xla_jax*.py`` use:

- ``handle``: uint8 array, shape ``(8,)``, the pool's serial number in the
  handlers' table of C clients (``shmatari_client`` in
  ``shmatari/shmatari.h``), never reused in the process and unlike any of
  another process (a random key maps the count): a program compiled ahead
  of time that outlives its pool, or one exported and loaded elsewhere,
  fails as on a closed pool. ``close()`` waits for the jitted calls still
  inside a handler (another thread's too) before the client is released.
- ``send(handle, action, env_id=None) -> handle``
- ``recv(handle) -> (handle, result)``
- ``step(handle, action, env_id=None) -> (handle, result)``: one custom call
  that sends then waits (the pool's ``step``).

Each function returns the handle it was given (XLA aliases it in place), and
calls on one pool MUST be chained through it: that data dependence is what
orders them inside a jitted program, as in EnvPool; the custom calls are also
marked ``has_side_effect`` so XLA never drops or merges them.

How it runs: no Python on the step path. The handlers (``csrc/xla/
shmatari_xla.cc``) are XLA FFI handlers (``jax.ffi``, api_version 1) that
call the same C client state machine the Python pool drives, so a pool may
be reset in Python and stepped in jitted code, and the other way round
(once the jitted results are ready). The observations are copied once, from
the ring's slot into XLA's output buffer. Because ``pip install`` builds
shmatari without jax, the handlers are compiled on first use with the
system C++ compiler (``$CXX``, else ``c++`` / ``g++`` / ``clang++``) against
``jax.ffi.include_dir()``, into a cache directory keyed by the source's hash
and jax's version (``$SHMATARI_XLA_CACHE``, else
``~/.cache/shmatari/xla``; it and the library must be this user's and
writable by no one else, or they are refused before anything is loaded,
judged on the descriptors the library is then loaded through);
``python -m shmatari.xla --build`` does it ahead of time. Each use marks
its build as used; a new build removes the builds of this cache not used
for ``PRUNE_DAYS`` days (30), and, of those not used for a day, the ones
beyond ``PRUNE_KEEP`` (16: the new build and the 15 most recently used
besides it; one build per shmatari and jax version piled up, some 150 kB
each). The library is loaded with ``ctypes`` and registered with
``jax.ffi.register_ffi_target(..., platform="cpu")``.

``result`` is the pool's own ``(obs, reward, terminated, truncated, info)``
(the EnvPool adapter converts it to EnvPool's), shapes ``(batch_size, ...)``:
``obs`` uint8 ``(batch_size, *obs_shape)``, ``reward`` float32,
``terminated`` / ``truncated`` bool; ``info`` holds the Python pool's
per-env keys (``env_id`` int32, ``lives`` int32, ``raw_reward`` float32,
``game_over`` bool, ``elapsed_step`` int32, ``episode_frame_number``,
``frame_number``, ``reset`` bool, ``worker_restarted`` bool) and, unless the
pool was made with ``episode_statistics=False``, ``episode`` (``r``, ``l``,
``frames``: zero where no game ended) and ``_episode`` (bool) in every
batch: a jitted program needs the same keys each step; with ``ram_info=True``
also ``ram``, uint8 ``(batch_size, 128)``, each row's console RAM after its
step, as the Python pool's (missing until 2026-12-06: a client-code pass).

What the FFI path does not do, and why:

- ``info["episode"]["t"]`` (seconds of an episode): a wall clock read per
  step would make the compiled program impure; use ``l`` or ``frames``.
- ``autoreset_mode="same_step"``: its ``info["final_obs"]`` is an object
  array (None where no episode ended) that has no fixed-shape XLA type;
  ``xla()`` raises for such pools.
- ``restart_workers``: replacing a dead worker is the Python supervisor's
  job; in jitted code a dead worker fails the call (``XlaRuntimeError``
  naming it) and the pool refuses later calls, as after a ``WorkerError``.
- 64-bit fields (``episode_frame_number``, ``frame_number``,
  ``episode["frames"]``, ``episode["r"]``) come as int32 / float32 unless
  ``jax_enable_x64`` is on.

None of these needs a Python callback, so none is used.

Rules: one thread drives a pool at a time. jax dispatches asynchronously,
so call ``jax.block_until_ready`` on a jitted call's results before calling
the pool's Python methods (``reset``, ``step``) again. ``close`` waits for the
jitted calls its thread dispatched to end, as ``block_until_ready`` would
(their results read after the close are whole, as in EnvPool), while the
pool makes progress: after 2 s with no batch (a stopped worker) a
``make()`` pool is marked closing and the calls left fail at their next
step; another thread's calls fail so at once. A closed pool's
functions fail with an ``XlaRuntimeError`` (its client is detached).
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import hashlib
import os
import pathlib
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings

import numpy as np

from . import _core
from .client import check_timeout
from .errors import ShmatariError, check_usable

__all__ = ["make", "build", "XlaBuildError"]

_HERE = pathlib.Path(__file__).resolve().parent
#: Compiler flags of the handler library (part of the cache key).
_FLAGS = ("-O2", "-std=c++17", "-shared", "-fPIC")
_TARGETS = ("send", "recv", "step")
_lock = threading.Lock()
_loaded: dict = {}


class XlaBuildError(ShmatariError, RuntimeError):
    """The XLA FFI handlers could not be found, built or loaded (no C++
    compiler, no jax, or a source tree without ``csrc/xla``)."""


def _sources() -> tuple[pathlib.Path, pathlib.Path]:
    """(handler source, include dir): the source tree's ``csrc`` or the copy
    that setup.py puts in the installed package (``shmatari/_csrc``)."""
    for root in (_HERE.parents[1] / "csrc", _HERE / "_csrc"):
        src, inc = root / "xla" / "shmatari_xla.cc", root / "include"
        if src.is_file() and (inc / "shmatari" / "shmatari.h").is_file():
            return src, inc
    raise XlaBuildError(f"the XLA handler source (csrc/xla/shmatari_xla.cc) is not beside "
                        f"{_HERE}: reinstall shmatari from its source tree")


def _compiler() -> str:
    for cxx in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if cxx and shutil.which(cxx):
            return cxx
    raise XlaBuildError("xla() compiles its XLA handlers on first use and needs a C++17 "
                        "compiler: install g++ or clang++ (or set $CXX)")


def _cache_dir() -> pathlib.Path:
    env = os.environ.get("SHMATARI_XLA_CACHE")
    if env:
        return pathlib.Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "shmatari" / "xla"


#: A build not used for this many days is removed when another is made.
PRUNE_DAYS = 30
#: Builds kept beyond that, the new one and the most recently used besides
#: it; the others go once a day unused.
PRUNE_KEEP = 16
#: A build's directory name: the first 24 hex digits of its key.
_KEY_NAME = re.compile(r"[0-9a-f]{24}")


def _prune(root: pathlib.Path, keep: pathlib.Path, now: float | None = None) -> list[str]:
    """Removes the builds in ``root`` (directories named as a key, this
    user's, not symbolic links) other than ``keep`` that were last used
    (their directory's mtime) over ``PRUNE_DAYS`` days ago, and those beyond
    ``PRUNE_KEEP`` (``keep`` and the most recently used besides it) that
    were last used over a day ago (so that a build another process has just
    chosen, and is about to load, stays; its mtime is read again just
    before the removal). Only the regular files inside and the directory
    itself are removed; anything else makes it leave that build alone.
    Errors are ignored: pruning is housekeeping.

    Returns:
        list[str]: the names of the builds removed.
    """
    now = time.time() if now is None else now
    builds = []
    try:
        with os.scandir(root) as it:
            for entry in it:
                if entry.name == keep.name or not _KEY_NAME.fullmatch(entry.name):
                    continue
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
                    builds.append((st.st_mtime, entry.name))
    except OSError:
        return []
    builds.sort(reverse=True)
    day = 86400.0
    removed = []
    for rank, (used, name) in enumerate(builds, start=1):
        age = now - used
        if not (age > PRUNE_DAYS * day or (rank >= PRUNE_KEEP and age > day)):
            continue
        path = root / name
        try:
            if os.lstat(path).st_mtime != used:  # used since it was read
                continue
            files = list(os.scandir(path))
            if not all(f.is_file(follow_symlinks=False) for f in files):
                continue
            for f in files:
                os.unlink(f.path)
            os.rmdir(path)
            removed.append(name)
        except OSError:
            continue
    return removed


#: What to install when jax is missing.
_NEEDS_JAX = ("xla() needs jax: pip install jax (from a clone of shmatari: "
              "pip install '.[jax]')")


def _check_private(path: pathlib.Path, fd: int | None = None) -> bool:
    """Refuses a cache directory or library another user could have written
    (a library there is loaded into this process): it must be this user's
    (or root's), not a symlink, and writable by no one else. This user's own
    directory that only its group can write (made under a umask of 002, as
    earlier versions did) loses its group's write bit instead; this user's
    library that its group can write is not used (False: build it again).

    Args:
        path: the directory or library (for the message, and for ``lstat``
            when ``fd`` is None).
        fd: a descriptor opened on it with ``O_NOFOLLOW``: it is judged
            (``fstat``, ``fchmod``) instead of the path, so that what is
            judged is what is then used, whatever is renamed meanwhile.

    Returns:
        bool: True if ``path`` is fit to use.

    Raises:
        XlaBuildError: it is not this user's (or root's), is a symbolic
            link, or others can write it.
    """
    st = os.lstat(path) if fd is None else os.fstat(fd)
    why = None
    if stat.S_ISLNK(st.st_mode):
        why = "is a symbolic link"
    elif st.st_uid not in (os.geteuid(), 0):
        why = f"belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})"
    elif st.st_mode & stat.S_IWOTH:
        why = "is writable by others"
    elif st.st_mode & stat.S_IWGRP:
        if st.st_uid != os.geteuid():
            why = "is writable by its group"
        elif stat.S_ISDIR(st.st_mode):
            mode = stat.S_IMODE(st.st_mode) & ~stat.S_IWGRP
            os.chmod(path, mode) if fd is None else os.fchmod(fd, mode)
        else:
            return False
    if why:
        raise XlaBuildError(
            f"{path} {why}: shmatari will not load its XLA handlers from where another "
            f"user could have put a library; set SHMATARI_XLA_CACHE to a directory only "
            f"you can write (or fix its owner and mode)")
    return True


def _open_private(lib: pathlib.Path) -> int:
    """Opens the library ``build`` returned for loading: its cache directory,
    then its key's directory inside it, then the file, each with
    ``O_NOFOLLOW`` and relative to the one before, each judged by
    ``_check_private`` on its descriptor. The file is then loaded through
    ``/proc/self/fd``, so the bytes loaded are those of the file judged
    even if the path is renamed between ``build`` and the load (a check of
    the path, then ``dlopen`` of the path, could load another file).

    Returns:
        int: a read-only descriptor of the library (the caller closes it).

    Raises:
        XlaBuildError: as ``_check_private``; or the file is not a regular
            file, or cannot be opened (a symbolic link in the last three
            places).
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    steps = ((lib.parent.parent, str(lib.parent.parent), os.O_DIRECTORY),
             (lib.parent, lib.parent.name, os.O_DIRECTORY),
             (lib, lib.name, 0))
    fds: list[int] = []
    try:
        for path, name, kind in steps:
            try:
                fds.append(os.open(name, flags | kind, dir_fd=fds[-1] if fds else None))
            except OSError as exc:
                link = " (a symbolic link)" if exc.errno == errno.ELOOP else ""
                raise XlaBuildError(f"cannot open {path} to load the XLA handlers: "
                                    f"{exc.strerror}{link}; delete it to rebuild") from exc
            if not _check_private(path, fds[-1]):
                raise XlaBuildError(f"{path} is writable by its group: delete it to rebuild")
        if not stat.S_ISREG(os.fstat(fds[-1]).st_mode):
            raise XlaBuildError(f"{lib} is not a regular file: delete it to rebuild")
        return fds.pop()
    finally:
        for fd in fds:
            os.close(fd)


def build(force: bool = False) -> pathlib.Path:
    """Compiles the XLA FFI handlers unless a build for this source and jax
    version is cached; returns the shared library's path.

    The key hashes the handler, every ``shmatari/*.h`` header, the flags, the
    compiler's name and jax/jaxlib's versions. The library is written to a
    temporary file and renamed into place, so concurrent builds are safe.
    The build used is marked as used; a new one prunes the cache
    (``_prune``: builds unused for ``PRUNE_DAYS`` days, and beyond the
    ``PRUNE_KEEP`` most recently used).

    Raises:
        XlaBuildError: no jax, no compiler, the compiler failed (its
            output is in the message), or the cache directory or a cached
            library is another user's or writable by others.
    """
    try:
        import jax
        import jaxlib
    except ImportError as exc:
        raise XlaBuildError(_NEEDS_JAX) from exc
    src, inc = _sources()
    cxx = _compiler()
    key = hashlib.sha256()
    for path in [src, *sorted((inc / "shmatari").glob("*.h"))]:
        key.update(path.name.encode() + b"\0" + path.read_bytes())
    key.update(repr((_FLAGS, cxx, jax.__version__, jaxlib.__version__)).encode())
    root = _cache_dir()
    out_dir = root / key.hexdigest()[:24]
    lib = out_dir / "libshmatari_xla.so"
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    out_dir.mkdir(mode=0o700, exist_ok=True)
    _check_private(root)
    _check_private(out_dir)
    if lib.exists() and not force and _check_private(lib):
        _mark_used(out_dir)
        return lib
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out_dir)
    os.close(fd)
    cmd = [cxx, *_FLAGS, "-isystem", jax.ffi.include_dir(), "-I", str(inc), str(src),
           "-o", tmp, "-ldl"]  # dlsym: the few Python functions a signal needs
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise XlaBuildError(f"building shmatari's XLA handlers failed ({' '.join(cmd)}):\n"
                                f"{proc.stderr[-4000:]}")
        os.chmod(tmp, 0o755)  # whatever the umask: writable by this user alone
        os.replace(tmp, lib)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    _mark_used(out_dir)
    _prune(root, out_dir)
    return lib


def _mark_used(build_dir: pathlib.Path) -> None:
    """Sets a build directory's mtime to now: ``_prune`` keeps the builds
    used of late."""
    try:
        os.utime(build_dir)
    except OSError:
        pass  # housekeeping only


def _load(client_bytes: int) -> dict:
    """Builds (if needed), loads and registers the handlers once per process;
    returns ``{op: target name}``."""
    with _lock:
        if not _loaded:
            import jax

            path = build()
            fd = _open_private(path)
            try:
                lib = ctypes.CDLL(f"/proc/self/fd/{fd}")
            except OSError as exc:
                raise XlaBuildError(f"cannot load {path}: {exc} (delete it to rebuild)") from exc
            finally:
                os.close(fd)
            try:
                lib.shmatari_xla_client_bytes.restype = ctypes.c_uint64
                lib.shmatari_xla_register.restype = ctypes.c_uint64
                lib.shmatari_xla_register.argtypes = [ctypes.c_void_p]
                lib.shmatari_xla_unregister.restype = ctypes.c_int
                lib.shmatari_xla_unregister.argtypes = [ctypes.c_uint64, ctypes.c_int64]
                loaded = {"client_bytes": lib.shmatari_xla_client_bytes(), "lib": lib}
                handlers = {op: getattr(lib, f"ShmatariXla{op.title()}") for op in _TARGETS}
            except AttributeError as exc:
                raise XlaBuildError(f"{path} lacks shmatari's XLA handlers ({exc}); "
                                    f"delete it to rebuild") from exc
            for op in _TARGETS:
                name = f"shmatari_xla_{op}"
                jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(handlers[op]),
                                            platform="cpu")
                loaded[op] = name
            _loaded.update(loaded)  # only once every target is registered
    if _loaded["client_bytes"] != client_bytes:
        raise XlaBuildError(f"the XLA handlers were built for a shmatari_client of "
                            f"{_loaded['client_bytes']} bytes and the extension has "
                            f"{client_bytes}: rebuild both from one source tree")
    return _loaded


def _to_int32(x):
    """An integer jax array as int32, values beyond int32 saturated (not
    wrapped)."""
    import jax.numpy as jnp

    src, dst = jnp.iinfo(x.dtype), np.iinfo(np.int32)
    lo, hi = max(int(src.min), int(dst.min)), min(int(src.max), int(dst.max))
    if lo > src.min or hi < src.max:
        x = jnp.clip(x, np.array(lo, x.dtype), np.array(hi, x.dtype))
    return x.astype(jnp.int32)


def make(pool, *, convert=None, timeout: float | None = None):
    """EnvPool's ``xla()`` for a :class:`shmatari.ShmVectorEnv` (see the module
    docstring for the contract and its limits).

    Args:
        pool: a local or attached pool, open, with ``autoreset_mode``
            ``"next_step"`` or ``"disabled"``.
        convert: None, or a function of the pool's ``(obs, reward,
            terminated, truncated, info)`` (jax arrays) returning what
            ``recv`` / ``step`` should return as ``result`` (the EnvPool
            adapter's conversion); it is traced, so it must use jax-traceable
            operations.
        timeout: seconds a ``recv`` / ``step`` waits for its batch before it
            fails, and, in a first-ready pool, for an answer from a worker
            that holds commands while the others fill batches (None: no
            limit; dead workers or a dead server fail it within 0.1 s either
            way). While it waits on the main thread,
            Python's signal handlers run as in the pool's ``recv()``: one
            that returns lets the wait go on, one that raises (Ctrl-C's
            KeyboardInterrupt) ends it with nothing taken and its exception
            is raised once the jitted call returns (the next ``recv`` returns
            the batch).

    Returns:
        (handle, recv, send, step): ``handle`` uint8 ``(8,)``; the three
        functions are pure functions of the handle (jit-able), and raise
        TypeError when traced with anything else for a handle.

    Raises:
        PoolClosedError: the pool is closed or broken.
        NotImplementedError: an ``autoreset_mode="same_step"`` pool.
        TypeError, ValueError: a timeout that is not None or seconds >= 0.
        ModuleNotFoundError: no jax (the message says what to install).
        XlaBuildError: the handlers could not be built.
    """
    try:
        import jax
        import jax.numpy as jnp
    except ModuleNotFoundError as exc:
        if exc.name not in ("jax", "jaxlib"):
            raise
        raise ModuleNotFoundError(_NEEDS_JAX, name=exc.name) from None

    client = pool._client
    check_usable(client.closed, client._broken)
    if client.autoreset == "same_step":
        raise NotImplementedError(
            "xla() on an autoreset_mode='same_step' pool: its info['final_obs'] is an "
            "object array (None where no episode ended) with no fixed-shape XLA type; "
            "make the pool with autoreset_mode='next_step' (EnvPool's rule)")
    timeout = check_timeout(timeout)
    seg = client._seg
    address, client_bytes = seg.client_address
    names = _load(client_bytes)
    # The handlers find the client by this serial, which the pool's close
    # takes out of their table (unregister): a compiled program that outlives
    # the pool then fails as on a closed pool, never reaching freed memory.
    # One serial a pool, so that every xla() of it returns the same handle,
    # as EnvPool's does (a handle of one call passed to another's functions
    # was refused as "another pool's": a client-code pass, 2026-12-06).
    serials = [s for lib, s in pool._res.xla_serials if lib is names["lib"]]
    if serials:
        serial = serials[0]
    else:
        serial = names["lib"].shmatari_xla_register(address)
        pool._res.xla_serials.append((names["lib"], serial))
    if getattr(getattr(pool._client.supervisor, "config", None), "restart_workers", False):
        warnings.warn(
            "xla() on a pool made with restart_workers=True: inside jitted code a dead "
            "worker is not replaced; it fails the jitted call and breaks the pool, as a "
            "WorkerError does (replacing a worker is the Python supervisor's job: step the "
            "pool from Python where restarts matter)", UserWarning, stacklevel=3)
    timeout_ns = np.int64(-1 if timeout is None else _core.timeout_to_ns(timeout))
    num_envs, batch_size = client.num_envs, client.batch_size
    batch_obs_shape = client._batch_obs_shape
    all_ids = np.arange(num_envs, dtype=np.int32)
    stats = client._episode_statistics
    has_ram = client._has_ram  # ram_info=True: info["ram"] uint8 (batch_size, 128)
    handle = np.frombuffer(int(serial).to_bytes(8, sys.byteorder), np.uint8).copy()
    attrs = {"client": np.uint64(serial)}

    def result_types():
        wide = jax.config.jax_enable_x64
        types = [jax.ShapeDtypeStruct(handle.shape, np.uint8),
                 jax.ShapeDtypeStruct(batch_obs_shape, np.uint8)]
        for _, dtype in _core.FIELDS:
            if dtype == np.uint8:  # shmatari_bool8
                dtype = np.dtype(bool)
            elif dtype.itemsize == 8 and not wide:
                dtype = np.dtype(np.float32 if dtype.kind == "f" else np.int32)
            types.append(jax.ShapeDtypeStruct((batch_size,), dtype))
        if has_ram:
            types.append(jax.ShapeDtypeStruct((batch_size, _core.RAM_BYTES), np.uint8))
        return types

    def to_result(outs):
        new_handle, obs, *values = outs
        ram = values.pop() if has_ram else None
        f = dict(zip((name for name, _ in _core.FIELDS), values))
        flags = f["flags"]
        info = {"env_id": f["env_id"], "lives": f["lives"], "raw_reward": f["raw_reward"],
                "game_over": f["game_over"], "elapsed_step": f["elapsed_step"],
                "episode_frame_number": f["episode_frame_number"],
                "frame_number": f["frame_number"],
                "reset": (flags & _core.FLAG_RESET) != 0,
                "worker_restarted": (flags & _core.FLAG_RESTARTED) != 0}
        if stats:
            done = f["episode_done"]
            info["episode"] = {"r": jnp.where(done, f["episode_return"], 0),
                               "l": jnp.where(done, f["elapsed_step"], 0),
                               "frames": jnp.where(done, f["episode_frame_number"], 0)}
            info["_episode"] = done
        if has_ram:
            info["ram"] = ram
        out = (obs, f["reward"], f["terminated"], f["truncated"], info)
        return new_handle, (convert(out) if convert is not None else out)

    def actions(action, env_id):
        action = jnp.asarray(action)
        if not jnp.issubdtype(action.dtype, jnp.integer) or action.ndim != 1:
            raise TypeError(f"action must be a 1-D array of ints, got {action.dtype} "
                            f"shape {action.shape}")
        if env_id is None:
            if action.shape[0] != num_envs:
                raise ValueError(
                    f"{action.shape[0]} actions without env_id: in xla(), actions without "
                    f"env_id go to every env ({num_envs}); pass env_id (info['env_id'] "
                    f"of the last recv) to address a batch")
            env_id = all_ids
        env_id = jnp.asarray(env_id)
        if not jnp.issubdtype(env_id.dtype, jnp.integer) or env_id.shape != action.shape:
            raise ValueError(f"env_id must be ints of the actions' shape {action.shape}, "
                             f"got {env_id.dtype} shape {env_id.shape}")
        # Saturate, not wrap, to int32 (with jax_enable_x64 an int64 of 2**32 + 3
        # would otherwise become action 3): out of range stays out of range,
        # for the handlers' checks to refuse.
        return _to_int32(action), _to_int32(env_id)

    def check_handle(h):
        # At trace time: a wrong array here would reach XLA's aliasing check
        # and fail there in XLA's words (input_output_aliases ... uint8[8]).
        h = jnp.asarray(h)
        if h.shape != handle.shape or h.dtype != np.uint8:
            raise TypeError(f"handle must be the uint8 {handle.shape} array xla() returned "
                            f"(or the one the last call returned), got {h.dtype} "
                            f"shape {h.shape}")
        return h

    def send(handle, action, env_id=None):
        handle = check_handle(handle)
        action, env_id = actions(action, env_id)
        call = jax.ffi.ffi_call(names["send"], (jax.ShapeDtypeStruct(handle.shape, np.uint8),),
                                has_side_effect=True, input_output_aliases={0: 0})
        return call(handle, action, env_id, **attrs)[0]

    def recv(handle):
        handle = check_handle(handle)
        call = jax.ffi.ffi_call(names["recv"], result_types(), has_side_effect=True,
                                input_output_aliases={0: 0})
        return to_result(call(handle, timeout_ns=timeout_ns, **attrs))

    def step(handle, action, env_id=None):
        handle = check_handle(handle)
        action, env_id = actions(action, env_id)
        call = jax.ffi.ffi_call(names["step"], result_types(), has_side_effect=True,
                                input_output_aliases={0: 0})
        return to_result(call(handle, action, env_id, timeout_ns=timeout_ns, **attrs))

    # The functions hold `pool` (and so its client struct) alive as long as
    # any jitted program that calls them can run.
    send.pool = recv.pool = step.pool = pool
    # close() waits for jitted calls still in flight before it releases the
    # client under them (supervisor._Resources._wait_for_jitted_calls).
    pool._res.xla = True
    return handle, recv, send, step


def main(argv=None) -> int:
    """``python -m shmatari.xla --build``: compiles the handlers now."""
    parser = argparse.ArgumentParser(prog="python -m shmatari.xla",
                                     description="Build shmatari's XLA FFI handlers.")
    parser.add_argument("--build", action="store_true", help="compile (if not cached)")
    parser.add_argument("--force", action="store_true", help="recompile even if cached")
    args = parser.parse_args(argv)
    if not (args.build or args.force):
        parser.print_help()
        return 2
    print(build(force=args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
