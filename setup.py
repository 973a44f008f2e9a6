"""Builds shmatari's C/Cython core (everything else is in pyproject.toml)."""

import glob
import sys

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

compile_args = ["-O3", "-std=gnu11", "-fno-math-errno", "-Wno-unused-function"]
# The frame kernel must match OpenCV bit for bit: no fused multiply-add.
compile_args.append("-ffp-contract=off")
if sys.platform == "darwin":
    compile_args.append("-Wno-unreachable-code")

extensions = [
    Extension(
        "shmatari._core",
        sources=["src/shmatari/_core.pyx", "csrc/shmatari_kernel.c"],
        include_dirs=["csrc", "csrc/include", numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        # _core.pyx includes the .pxi files beside it (one module cut into files by
        # concern) and cimports _core.pxd automatically.
        depends=["csrc/shmatari_kernel.h", "csrc/include/shmatari/layout.h",
                 "csrc/include/shmatari/sync.h", "csrc/include/shmatari/shmatari.h",
                 "src/shmatari/_core.pxd", *sorted(glob.glob("src/shmatari/_core_*.pxi"))],
        extra_compile_args=compile_args,
    )
]

setup(ext_modules=cythonize(extensions, compiler_directives={"language_level": "3"}))
