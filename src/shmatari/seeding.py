"""Seeding: one seed for a whole experiment, and how shmatari derives every stream from it.

Envs
----
A pool has one seed, a non-negative integer below 2**128 (``seed=None`` draws
128 bits of fresh entropy once, in the parent, exposed as
``env.seed_entropy``). Env *i* derives everything random from::

    numpy.random.SeedSequence(seed, spawn_key=(i,))

- ALE's ``random_seed`` (which drives sticky actions and every other random
  choice inside the emulator) is the first 32-bit word of that sequence's
  ``generate_state(1, numpy.uint32)``, with its top bit cleared
  (ALE takes a signed 32-bit int).
- The no-op counts at reset come from ``numpy.random.Generator(PCG64(
  SeedSequence(seed, spawn_key=(i, 0))))``, i.e. the sequence's first child.

A worker that dies in a pool made with ``restart_workers=True`` is replaced,
and its envs are rebuilt; after the *k*-th restart of its worker, env *i*
derives from ``SeedSequence(seed, spawn_key=(i, k))`` instead (no-op counts
from its child ``(i, k, 0)``), ``seed`` being the pool's seed at that moment.
A rebuilt env so plays new games, reproducibly, rather than replaying the
games it began the run with, which would correlate its data with its own
past (``(i, 0)`` is the no-op stream, so *k* starts at 1 and no stream is
shared). ``reset(seed=...)`` re-derives every env from ``(i,)`` again; it
leaves the restart counts as they are (*k* counts every restart of the
worker since the pool was made: docs/reproducibility.md).

A pool may be one slice of a larger one (:mod:`shmatari.ray` runs envs
``b..b+n-1`` on one node): with ``env_index_offset=b`` its env *j* is seeded
as env ``b + j``, so the slice replays those envs of a local pool exactly.
When a supervisor outside the pool rebuilds it (a restarted Ray node, its
``pool_generation`` *g* >= 1), env *i* derives from ``spawn_key=(i, k, g)``
(no-op counts from ``(i, k, g, 0)``), *k* being its worker's restart count
(0 at first): a key of three words, which neither ``(i,)``, ``(i, k)`` nor
their no-op children ``(i, 0)``, ``(i, k, 0)`` can equal, as *g* >= 1.

So env *i*'s trajectory depends only on (seed, i, options, actions): not on
the number of workers, the start method, the parent's ``random`` or
``numpy.random`` state, or the clock; and pools with seeds 0 and 1 share no
stream (``seed + i`` schemes make them overlap).

Your own workers
----------------
:func:`worker_seed` and :func:`spawn_seeds` hand out the same derivation for
your own processes (data loaders, evaluators, actors), and
:func:`init_worker` reseeds everything in a child; :func:`seed_everything`
seeds the process you are in. The guide is ``docs/reproducibility.md``.

The derivation
--------------
Precisely enough to re-implement (``examples/seed_sequence.cpp`` does, and a
test checks it against NumPy). ``SeedSequence`` is NumPy's port of Melissa
O'Neill's ``seed_seq`` (``numpy/random/bit_generator.pyx``). All arithmetic
is on uint32, wrapping.
Constants: ``INIT_A = 0x43b0d7e5``, ``MULT_A = 0x931e8875``,
``INIT_B = 0x8b51f9dd``, ``MULT_B = 0x58f38ded``, ``MIX_MULT_L = 0xca01f9dd``,
``MIX_MULT_R = 0x4973f715``; the pool has 4 words.

1. **Assemble** the entropy ``e``: ``seed`` as 32-bit words, least significant first
   (0 is one word, 0), padded with zero words to 4 words (because a spawn
   key follows), then ``index`` as one word (indices are below 2**32).
   ``seed=5, index=3`` assembles to ``[5, 0, 0, 0, 3]``. Seeds are below
   2**128, so the seed is always exactly the first 4 words and the key the
   rest: no two (seed, key) pairs assemble alike. (NumPy pads only a
   shorter seed: with seeds of 2**128 and more, ``SeedSequence(2**128,
   spawn_key=(1,))`` and ``SeedSequence(0, spawn_key=(1, 1))`` both assemble
   ``[0, 0, 0, 0, 1, 1]``, so a pool seeded 2**128 would replay pool 0's
   env 1 after a restart. shmatari refuses those seeds.)
2. **Mix** into ``pool[0..3]`` with a running ``h = INIT_A`` and
   ``hashmix(v): v ^= h; h *= MULT_A; v *= h; v ^= v >> 16; return v`` and
   ``mix(x, y): r = MIX_MULT_L * x - MIX_MULT_R * y; r ^= r >> 16; return r``:
   ``pool[i] = hashmix(e[i])`` for i < 4 (``hashmix(0)`` past the end of
   ``e``); then for each ``src`` in 0..3 and each ``dst != src`` in 0..3,
   ``pool[dst] = mix(pool[dst], hashmix(pool[src]))``; then for each further
   word ``e[k]`` (k >= 4), for each ``dst`` in 0..3,
   ``pool[dst] = mix(pool[dst], hashmix(e[k]))``.
3. **Generate** ``n`` words with ``h = INIT_B``: word ``j`` is
   ``v = pool[j % 4]; v ^= h; h *= MULT_B; v *= h; v ^= v >> 16``.

A 32-bit seed is word 0; a 64-bit seed is ``word0 | word1 << 32`` (what
``generate_state(1, numpy.uint64)`` returns); in general ``bits // 32``
words, word *k* shifted left by ``32 * k``. ALE's seed is ``word0 & 0x7fffffff``.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import numbers
import os
import random
import sys
import warnings

import numpy as np

__all__ = [
    "SEED_BITS",
    "check_seed",
    "draw_entropy",
    "env_seed_sequence",
    "ale_seed",
    "noop_rng",
    "seed_to_words",
    "words_to_seed",
    "worker_seed",
    "spawn_seeds",
    "library_seed",
    "seed_everything",
    "init_worker",
    "current_worker",
    "SeedRecord",
    "WorkerInfo",
    "ReproducibilityWarning",
]

#: Seeds are integers in [0, 2**SEED_BITS): at most NumPy's 4 pool words, so
#: that seeds and spawn keys never run together (see the module's notes).
SEED_BITS = 128


def check_seed(seed, name: str = "seed") -> int:
    """Validates a pool seed.

    Raises:
        TypeError: not an integer (bools and floats are refused).
        ValueError: negative or not below 2**128.
    """
    if isinstance(seed, np.ndarray) and seed.ndim == 0:
        seed = seed[()]  # a 0-d array is one value (np.int64 when an integer)
    if isinstance(seed, (list, tuple, np.ndarray)):
        raise TypeError(f"{name} must be one int: shmatari derives every env's streams from one "
                        f"pool seed (SeedSequence(seed, spawn_key=(i,))), so per-env seeds, as "
                        f"Gymnasium's reset(seed=[...]) takes, do not apply; got {seed!r}")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"{name} must be a non-negative int or None, got {type(seed).__name__} {seed!r}")
    seed = int(seed)
    if seed < 0 or seed >= 1 << SEED_BITS:
        raise ValueError(f"{name} must be in [0, 2**{SEED_BITS}), got {seed}")
    return seed


def draw_entropy() -> int:
    """128 bits of fresh OS entropy, as ``SeedSequence()`` draws them."""
    return int(np.random.SeedSequence().entropy)


def _env_key(index: int, restart: int, generation: int = 0) -> tuple[int, ...]:
    if generation:
        return (index, restart, generation)
    return (index,) if restart == 0 else (index, restart)


def env_seed_sequence(seed: int, index: int, restart: int = 0,
                      generation: int = 0) -> np.random.SeedSequence:
    """``SeedSequence(seed, spawn_key=(index,))``: env ``index``'s root
    sequence; ``spawn_key=(index, restart)`` after its worker's ``restart``-th
    restart (>= 1); ``(index, restart, generation)`` in a pool rebuilt
    ``generation`` (>= 1) times by a supervisor (a restarted Ray node).

    Raises:
        TypeError, ValueError: ``seed`` as :func:`check_seed`."""
    return np.random.SeedSequence(check_seed(seed),
                                  spawn_key=_env_key(index, restart, generation))


def ale_seed(seed: int, index: int, restart: int = 0, generation: int = 0) -> int:
    """The ``random_seed`` given to env ``index``'s ALE: an int in [0, 2**31)."""
    word = env_seed_sequence(seed, index, restart, generation).generate_state(1, np.uint32)[0]
    return int(word) & 0x7FFFFFFF


def noop_rng(seed: int, index: int, restart: int = 0, generation: int = 0) -> np.random.Generator:
    """Env ``index``'s generator for no-op counts: PCG64 on spawn key
    (index, 0), or (index, restart, 0) after a restart, or (index, restart,
    generation, 0) in a rebuilt pool."""
    key = _env_key(index, restart, generation) + (0,)
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(check_seed(seed),
                                                                      spawn_key=key)))


#: uint64 words of the segment's ``seed_words`` (layout.h's SHMATARI_SEED_WORDS;
#: seeds fill the first two).
SEED_WORDS = 4


def seed_to_words(seed: int, n: int = SEED_WORDS) -> list[int]:
    """Splits a seed into ``n`` uint64 words, least significant first."""
    return [(seed >> (64 * k)) & 0xFFFFFFFFFFFFFFFF for k in range(n)]


def words_to_seed(words) -> int:
    """Inverse of :func:`seed_to_words`."""
    return sum(int(w) << (64 * k) for k, w in enumerate(words))


# -- seeds for your own workers ---------------------------------------------------

#: Widths :func:`worker_seed` can return, in bits.
WORKER_SEED_BITS = (32, 64, 128)


def _check_index(index, name: str = "index") -> int:
    if isinstance(index, (bool, np.bool_)) or not isinstance(index, numbers.Integral):
        raise TypeError(f"{name} must be a non-negative int, got {type(index).__name__} {index!r}")
    index = int(index)
    if not 0 <= index < 1 << 32:
        raise ValueError(f"{name} must be in [0, 2**32), got {index}")
    return index


def _check_bits(bits) -> int:
    if (isinstance(bits, bool) or not isinstance(bits, numbers.Integral)
            or bits not in WORKER_SEED_BITS):
        raise ValueError(f"bits must be one of {WORKER_SEED_BITS}, got {bits!r}")
    return int(bits)


def _words_to_int(words) -> int:
    return sum(int(w) << (32 * k) for k, w in enumerate(words))


def worker_seed(seed: int, index: int, *, bits: int = 64) -> int:
    """Worker ``index``'s seed: the words of ``SeedSequence(seed, spawn_key=(index,))``.

    This is env ``index``'s derivation (see the module docstring for the
    algorithm), so ``worker_seed(s, i, bits=32) & 0x7fffffff == ale_seed(s, i)``.
    Seeds of different indices, or of neighbouring root seeds, are
    independent hashes: unlike ``seed + index``, roots 0 and 1 share no worker.

    Args:
        seed: the root seed, an int in [0, 2**128).
        index: the worker's index, an int in [0, 2**32).
        bits: 32, 64 or 128. The seed is ``generate_state(bits // 32,
            numpy.uint32)``'s words, word *k* shifted left by ``32 * k``
            (64 bits: ``generate_state(1, numpy.uint64)[0]``).

    Returns:
        int: in [0, 2**bits); feed it to ``numpy.random.default_rng``,
        :func:`seed_everything`, :func:`init_worker`, which re-hash it. Not
        straight to an MT19937 seeded from one 32-bit int (torch's
        ``manual_seed``, ``numpy.random.seed``, ``std::mt19937``): its low
        32 bits are env ``index``'s ALE seed for half the indices, the very
        stream of that env's sticky actions; pass ``library_seed(seed)`` there.

    Raises:
        TypeError: ``seed`` or ``index`` not an int.
        ValueError: ``seed``, ``index`` or ``bits`` out of range.
    """
    seed = check_seed(seed)
    index = _check_index(index)
    bits = _check_bits(bits)
    return _words_to_int(env_seed_sequence(seed, index).generate_state(bits // 32, np.uint32))


def spawn_seeds(seed: int, n: int, *, bits: int = 64) -> list[int]:
    """Seeds for workers ``0..n-1``: ``[worker_seed(seed, i, bits=bits) for i in range(n)]``.

    The same seeds as the children of a fresh ``SeedSequence(seed).spawn(n)``
    (child *i* has ``spawn_key=(i,)``).

    Raises:
        TypeError: ``seed`` or ``n`` not an int.
        ValueError: ``seed``, ``n`` or ``bits`` out of range.
    """
    n = _check_index(n, "n")
    return [worker_seed(seed, i, bits=bits) for i in range(n)]


# -- seeding this process ---------------------------------------------------------

#: :func:`seed_everything` gives libraries 32-bit seeds: NumPy's legacy
#: generator takes no more.
LIBRARY_SEED_BITS = 32

#: cuBLAS reads this at handle creation; ":4096:8" is what PyTorch's
#: reproducibility notes prescribe for deterministic cuBLAS on CUDA >= 10.2.
CUBLAS_WORKSPACE_CONFIG = ":4096:8"


class ReproducibilityWarning(UserWarning):
    """Something that breaks replay was found and cannot be fixed from here."""


def library_seed(seed: int) -> int:
    """The seed :func:`seed_everything` passes to every library.

    ``seed`` itself when it is below 2**32, so ``seed_everything(42)`` seeds as
    the usual hand-written ``random.seed(42); numpy.random.seed(42);
    torch.manual_seed(42)``; a larger seed (e.g. 128 bits of entropy) is
    folded to word 0 of ``SeedSequence(seed).generate_state(1, numpy.uint32)``.

    Raises:
        TypeError, ValueError: as :func:`check_seed`.
    """
    seed = check_seed(seed)
    if seed < 1 << LIBRARY_SEED_BITS:
        return seed
    return int(np.random.SeedSequence(seed).generate_state(1, np.uint32)[0])


@dataclasses.dataclass(frozen=True)
class SeedRecord:
    """What :func:`seed_everything` set; log it with the run (``as_dict()``).

    Attributes:
        seed: the root seed as given, or drawn when None was given: pass it
            back to :func:`seed_everything` to replay.
        library_seed: the seed every library got (:func:`library_seed`).
        calls: what was called or set, in order, as ``{name: value}``:
            ``{"random.seed": 42, "numpy.random.seed": 42,
            "torch.manual_seed": 42, "torch.backends.cudnn.deterministic":
            True, ...}``; the names are the calls to make by hand to redo it.
        environ: environment variables set, ``{name: value}``.
        absent: frameworks not installed (or failing to import), hence not
            seeded: ``"torch"``, ``"tensorflow"``.
        pythonhashseed: ``PYTHONHASHSEED`` in this process's environment,
            None when unset.
    """

    seed: int
    library_seed: int
    calls: dict
    environ: dict
    absent: tuple
    pythonhashseed: str | None

    def as_dict(self) -> dict:
        """The record as plain JSON-ready types."""
        return dataclasses.asdict(self) | {"absent": list(self.absent)}


def _framework(name: str):
    """The module if installed (importing it if needed), else None."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    if importlib.util.find_spec(name) is None:
        return None
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - a broken install must not stop seeding the rest
        warnings.warn(f"{name} is installed but failed to import ({type(exc).__name__}: {exc}); "
                      f"it was not seeded", ReproducibilityWarning, stacklevel=4)
        return None


def _hashseed_problem() -> str | None:
    value = os.environ.get("PYTHONHASHSEED")
    if value is None or value == "random":
        return "is not set"
    if value == "0" and sys.flags.hash_randomization:
        return "was set after this interpreter started"
    return None


def _seed_torch(torch, seed: int, deterministic: bool, calls: dict, environ: dict) -> None:
    torch.manual_seed(seed)  # the CPU generator and every CUDA device's
    calls["torch.manual_seed"] = seed
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
        calls["torch.cuda.manual_seed_all"] = seed
        calls["torch.cuda.device_count"] = torch.cuda.device_count()
    if not deterministic:
        return
    if "CUBLAS_WORKSPACE_CONFIG" not in os.environ:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE_CONFIG
        environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE_CONFIG
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            warnings.warn("CUDA was initialised before seed_everything() set "
                          "CUBLAS_WORKSPACE_CONFIG; cuBLAS handles made before may stay "
                          "nondeterministic: call seed_everything() first thing, or export "
                          f"CUBLAS_WORKSPACE_CONFIG={CUBLAS_WORKSPACE_CONFIG}",
                          ReproducibilityWarning, stacklevel=4)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True)
    calls["torch.backends.cudnn.deterministic"] = True
    calls["torch.backends.cudnn.benchmark"] = False
    calls["torch.use_deterministic_algorithms"] = True


def _seed_all(seed, deterministic_torch: bool, warn_hashseed: bool) -> SeedRecord:
    seed = draw_entropy() if seed is None else check_seed(seed)
    lib = library_seed(seed)
    calls, environ, absent = {}, {}, []
    random.seed(lib)
    calls["random.seed"] = lib
    np.random.seed(lib)
    calls["numpy.random.seed"] = lib
    torch = _framework("torch")
    if torch is None:
        absent.append("torch")
    else:
        _seed_torch(torch, lib, deterministic_torch, calls, environ)
    tf = _framework("tensorflow")
    if tf is None:
        absent.append("tensorflow")
    else:
        tf.random.set_seed(lib)
        calls["tensorflow.random.set_seed"] = lib
    problem = _hashseed_problem()
    if problem and warn_hashseed and problem not in _HASHSEED_WARNED:
        # once per process: Python's own once-per-place registry is cleared
        # whenever any library changes the warning filters (torch does)
        _HASHSEED_WARNED.add(problem)
        warnings.warn(
            f"PYTHONHASHSEED {problem}: hashes of str and bytes, and so the iteration order "
            f"of sets and anything built from it, change from run to run and differ between "
            f"spawned workers. Python reads it only at start-up, so it cannot be set from "
            f"here: launch the program as `PYTHONHASHSEED=0 {_launch_command()}` (or export "
            f"it in the job script).", ReproducibilityWarning, stacklevel=3)
    return SeedRecord(seed=seed, library_seed=lib, calls=calls, environ=environ,
                      absent=tuple(absent), pythonhashseed=os.environ.get("PYTHONHASHSEED"))


#: The PYTHONHASHSEED problems already warned about in this process.
_HASHSEED_WARNED: set = set()


def _launch_command() -> str:
    """How this program was started, for the PYTHONHASHSEED advice:
    ``python <script> <args>`` from ``sys.argv`` (its first 6 words), the
    command's name alone for a console script found on ``PATH``
    (``shmatari-check --train``), or ``python your_script.py`` when there is
    no script (``-c``, a REPL)."""
    import shlex
    import shutil

    argv = list(getattr(sys, "argv", None) or [])
    if not argv or argv[0] in ("", "-c", "-"):
        return "python your_script.py"
    words = [argv[0]] + argv[1:6] + (["..."] if len(argv) > 6 else [])
    name = os.path.basename(argv[0])
    found = shutil.which(name) if not name.endswith(".py") else None
    if found and os.path.realpath(found) == os.path.realpath(argv[0]):
        return shlex.join([name] + words[1:]).replace("'...'", "...")
    return "python " + shlex.join(words).replace("'...'", "...")


def seed_everything(seed: int | None, *, deterministic_torch: bool = True) -> SeedRecord:
    """Seeds every random source of this process from one seed.

    Each library gets :func:`library_seed` ``(seed)``:

    - Python's ``random.seed``;
    - ``numpy.random.seed``: NumPy's global legacy ``RandomState``, behind
      ``numpy.random.rand``/``randint``/... (NumPy has no global
      ``Generator``: build yours from :func:`worker_seed`/:func:`spawn_seeds`);
    - if torch is installed, ``torch.manual_seed`` (the CPU generator and
      every CUDA device's) and ``torch.cuda.manual_seed_all``; with
      ``deterministic_torch``, also ``torch.backends.cudnn.deterministic =
      True``, ``torch.backends.cudnn.benchmark = False``,
      ``torch.use_deterministic_algorithms(True)`` (ops with no deterministic
      kernel then raise ``RuntimeError``) and ``CUBLAS_WORKSPACE_CONFIG=:4096:8``
      unless already set (cuBLAS needs it for determinism on CUDA >= 10.2);
    - if TensorFlow is installed, ``tensorflow.random.set_seed``.

    Frameworks installed but not yet imported are imported. Call it first
    thing, before building models or touching CUDA.

    Warns:
        ReproducibilityWarning: ``PYTHONHASHSEED`` is unset (or was set after
            start-up), so str hashes, and set iteration order, change from run
            to run; Python reads it only at start-up, so the warning says how
            to launch the program instead.

    Args:
        seed: an int in [0, 2**128), or None to draw 128 bits of fresh
            entropy (kept in the returned record's ``seed``, to replay).
        deterministic_torch: set torch's deterministic flags (above).

    Returns:
        SeedRecord: the seed and everything set, for the run's log.

    Raises:
        TypeError: ``seed`` is not an int or None.
        ValueError: ``seed`` is negative or not below 2**128.
    """
    return _seed_all(seed, deterministic_torch, warn_hashseed=True)


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """Who this worker is, as :func:`init_worker` set it.

    Attributes:
        seed: the experiment's root seed.
        index: this worker's index.
        worker_seed: ``worker_seed(seed, index)``, the seed everything got.
        record: what :func:`seed_everything` set.
    """

    seed: int
    index: int
    worker_seed: int
    record: SeedRecord


_current_worker: WorkerInfo | None = None


def init_worker(seed: int, index, deterministic_torch: bool = True) -> WorkerInfo:
    """Reseeds everything in a child process: ``seed_everything(worker_seed(seed, index))``.

    Made for ``multiprocessing.Pool``'s ``initializer``. A pool passes the
    same ``initargs`` to every worker, so give it a shared counter as
    ``index``; each worker takes the next value::

        ctx = multiprocessing.get_context("spawn")
        counter = ctx.Value("q", 0)
        pool = ctx.Pool(4, initializer=shmatari.seeding.init_worker,
                        initargs=(seed, counter))

    Which process gets which index depends on start-up order; the set of
    seeds does not. Tasks run on whichever worker is free, so for results
    that replay, also seed each task (``spawn_seeds(seed, n_tasks)``).
    No ``PYTHONHASHSEED`` warning is given in workers; the record has the value.

    Args:
        seed: the experiment's root seed, an int in [0, 2**128).
        index: this worker's index, an int in [0, 2**32), or a shared
            counter (``multiprocessing.Value`` with a lock) to take it from.
        deterministic_torch: as :func:`seed_everything`.

    Returns:
        WorkerInfo: also kept for :func:`current_worker`.

    Raises:
        TypeError: ``index`` is neither an int nor a locked shared value.
        ValueError: ``seed`` or ``index`` out of range.
    """
    global _current_worker
    seed = check_seed(seed)
    if hasattr(index, "get_lock") and hasattr(index, "value"):
        with index.get_lock():
            taken = index.value
            index.value = taken + 1
        index = taken
    index = _check_index(index)
    wseed = worker_seed(seed, index)
    record = _seed_all(wseed, deterministic_torch, warn_hashseed=False)
    _current_worker = WorkerInfo(seed=seed, index=index, worker_seed=wseed, record=record)
    return _current_worker


def current_worker() -> WorkerInfo | None:
    """What :func:`init_worker` set in this process; None if it was not called."""
    return _current_worker
