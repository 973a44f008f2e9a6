"""ale_py for worker processes, without its Gymnasium half.

ale_py's ``__init__`` imports Gymnasium (for ``AtariEnv`` and its env
registrations) whenever Gymnasium is installed, and skips that part on
ImportError. A worker needs only ``ALEInterface`` and ``ale_py.roms``, so
importing this module imports ale_py with Gymnasium hidden, unless either is
already loaded (a forked worker inherits its parent's modules).

Imported only by :func:`shmatari.worker.worker_main` and by the fork server
(``set_forkserver_preload``), never in a trainer's process, where ale_py must
register its Gymnasium envs as usual.
"""

import sys


def _import_ale_py() -> None:
    if "ale_py" in sys.modules or "gymnasium" in sys.modules:
        return
    sys.modules["gymnasium"] = None  # makes `import gymnasium` raise ImportError
    try:
        import ale_py  # noqa: F401
    finally:
        if "gymnasium" in sys.modules and sys.modules["gymnasium"] is None:
            del sys.modules["gymnasium"]


_import_ale_py()
