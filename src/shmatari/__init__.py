"""shmatari: Atari envs served to RL trainers through shared memory.

Worker processes run the Arcade Learning Environment (through ale-py), write
preprocessed frames straight into a shared-memory ring with a C kernel, and
take their actions from lock-free flag words, so nothing is pickled on the
step path. :func:`make` returns a Gymnasium vector env; :func:`attach`
drives a pool that another process serves (``shmatari serve``).
"""

from .check import check_reproducibility
from .env import ShmVectorEnv, attach, make
from .errors import (
    AttachError,
    CallOrderError,
    PoolClosedError,
    SharedMemorySpaceError,
    ShmatariError,
    StepTimeoutError,
    WorkerError,
)
from .games import list_games, resolve_game

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
    "AttachError",
    "list_games",
    "resolve_game",
    "check_reproducibility",
    "__version__",
]

__version__ = "0.1.0"
