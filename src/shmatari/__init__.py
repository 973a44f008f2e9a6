"""shmatari: Atari envs served to RL trainers through shared memory.

Worker processes run the Arcade Learning Environment (through ale-py), write
preprocessed frames straight into a shared-memory ring with a C kernel, and
take their actions from lock-free flag words, so nothing is pickled on the
step path. :func:`make` returns a Gymnasium vector env; :func:`attach`
drives a pool that another process serves (``shmatari serve``).

``import shmatari`` is light: it loads the exceptions only. The pool
(:func:`make`, :func:`attach`, :class:`ShmVectorEnv`), the checker, the
benchmark, the baselines and the seeding helpers load when first used, so
that a worker process (which imports ``shmatari.worker``) never loads
Gymnasium, the pool or the checker.
"""

from .errors import (
    AttachError,
    CallOrderError,
    PoolClosedError,
    ResourceLimitError,
    SharedMemorySpaceError,
    ShmatariError,
    StepTimeoutError,
    WorkerError,
)

__all__ = [
    "make",
    "attach",
    "ShmVectorEnv",
    "ShmatariError",
    "WorkerError",
    "StepTimeoutError",
    "PoolClosedError",
    "CallOrderError",
    "SharedMemorySpaceError",
    "ResourceLimitError",
    "AttachError",
    "list_games",
    "resolve_game",
    "check_reproducibility",
    "__version__",
]

__version__ = "0.1.0"

#: Public names loaded on first use: name -> the submodule that defines it.
_LAZY = {
    "make": "env",
    "attach": "env",
    "ShmVectorEnv": "env",
    "list_games": "games",
    "resolve_game": "games",
    "check_reproducibility": "check",
}
#: Submodules reachable as attributes (``shmatari.seeding``) without importing them first.
_SUBMODULES = frozenset({
    "atari", "baselines", "bench", "check", "cli", "client", "config", "env", "errors",
    "games", "results", "seeding", "shm", "spin", "supervisor", "worker",
})


def __getattr__(name: str):
    from importlib import import_module  # here, so that dir(shmatari) lists no importlib

    module = _LAZY.get(name)
    if module is not None:
        from ._sigint import deferred_sigint

        # The pool imports Gymnasium, NumPy, ale-py: a Ctrl-C in their native
        # imports can come out as an ImportError or be lost; raise it after.
        with deferred_sigint():
            value = getattr(import_module(f".{module}", __name__), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | _SUBMODULES)
