# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""shmatari's compiled core: the layout contract, signalling, frame kernel and
the per-env Atari step.

Everything here is built from ``csrc/include/shmatari/layout.h``,
``csrc/include/shmatari/sync.h`` and ``csrc/shmatari_kernel.{h,c}``; the
Python modules read constants and offsets from this module only.

One compiled module, cut into files by concern (the worker loop calls
``EnvCore`` cdef methods in a tight loop, so they stay in one extension):

- ``_core.pxd``: the C declarations of the csrc headers (cimported here automatically).
- ``_core_contract.pxi``: constants, offset tables, layout/header/name helpers.
- ``_core_segment.pxi``: ``Segment``, typed access to a mapped segment.
- ``_core_actions.pxi``: ``check_actions``.
- ``_core_kernel.pxi``: the frame kernel wrappers ``Resizer`` and ``Palette``.
- ``_core_envcore.pxi``: the per-env logic ``EnvCore``, ``NullCore``, ``AtariCore``.
- ``_core_worker.pxi``: the worker loop, ``mark_worker``, ``set_num_actions``.
"""

from cpython.exc cimport PyErr_CheckSignals
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset, strlen

import numpy as np

cimport numpy as cnp
from cpython.ref cimport Py_INCREF

cnp.import_array()

include "_core_contract.pxi"
include "_core_segment.pxi"
include "_core_actions.pxi"
include "_core_kernel.pxi"
include "_core_envcore.pxi"
include "_core_worker.pxi"
