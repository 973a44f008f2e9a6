"""The layout contract: C and Python read the same offsets."""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess

import numpy as np
import pytest

from shmatari import _core
from conftest import build_sanitized

ROOT = pathlib.Path(__file__).resolve().parents[1]
INCLUDE = ROOT / "csrc" / "include"
DOC = ROOT / "docs" / "layout.md"
DOC_TYPES = {"uint8": "|u1", "int32": "<i4", "uint32": "<u4", "int64": "<i8", "uint64": "<u8",
             "float32": "<f4", "float64": "<f8"}


COMPILERS = {"c": ("cc", "gcc", "clang"), "c++": ("c++", "g++", "clang++")}
STRICT = ["-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{INCLUDE}"]


def _dump(tmp_path_factory, lang: str) -> dict:
    cc = next((c for c in map(shutil.which, COMPILERS[lang]) if c), None)
    if cc is None:
        pytest.skip(f"no {lang} compiler on this machine")
    exe = tmp_path_factory.mktemp("layout") / "layout_dump"
    std = ["-std=c11"] if lang == "c" else ["-x", "c++", "-std=c++11"]
    build_sanitized([cc, *std, *STRICT, str(ROOT / "tests" / "c" / "layout_dump.c"),
                     "-o", str(exe)])
    return json.loads(subprocess.run([str(exe)], check=True, capture_output=True,
                                     text=True).stdout)


@pytest.fixture(scope="module", params=["c", "c++"])
def c_layout(request, tmp_path_factory):
    return _dump(tmp_path_factory, request.param)


def test_struct_offsets_agree_between_c_and_python(c_layout):
    """The headers compile as strict C11 and as C++, and both see the layout,
    the constants and the status codes that Python sees."""
    constants = c_layout.pop("constants")
    status = c_layout.pop("status")
    fields = c_layout.pop("fields")
    assert c_layout == _core.struct_layout()
    assert fields == [[name, dtype.str, dtype.itemsize, unit, meaning]
                      for name, dtype, _, unit, meaning in _core.FIELD_SPECS]
    assert constants == {
        "magic": _core.MAGIC, "abi_major": _core.ABI_MAJOR, "header_bytes": _core.HEADER_BYTES,
        "field_count": len(_core.FIELDS), "SHMATARI_ABI_MINOR": _core.ABI_MINOR,
        "SHMATARI_ALIGN": _core.ALIGN, "SHMATARI_SLOT_HEADER_BYTES": _core.SLOT_HEADER_BYTES,
        "SHMATARI_ERROR_BYTES": _core.ERROR_BYTES, "SHMATARI_MAX_ACTIONS": _core.MAX_ACTIONS,
        "SHMATARI_SEED_WORDS": _core.SEED_WORDS, "SHMATARI_FLAG_RESET": _core.FLAG_RESET,
        "SHMATARI_FLAG_RESTARTED": _core.FLAG_RESTARTED, "SHMATARI_FLAG_FINAL": _core.FLAG_FINAL,
        "SHMATARI_FLAG_OBSERVED": _core.FLAG_OBSERVED, "SHMATARI_CMD_STEP": _core.CMD_STEP,
        "SHMATARI_CMD_RESET": _core.CMD_RESET, "SHMATARI_CMD_RESEED": _core.CMD_RESEED,
        "SHMATARI_CMD_OBSERVE": _core.CMD_OBSERVE,
        "SHMATARI_AUTORESET_NEXT_STEP": _core.AUTORESET_MODES["next_step"],
        "SHMATARI_AUTORESET_SAME_STEP": _core.AUTORESET_MODES["same_step"],
        "SHMATARI_AUTORESET_DISABLED": _core.AUTORESET_MODES["disabled"],
        "SHMATARI_WORKER_STARTING": _core.WORKER_STARTING,
        "SHMATARI_WORKER_READY": _core.WORKER_READY,
        "SHMATARI_WORKER_FAILED": _core.WORKER_FAILED,
        "SHMATARI_WORKER_EXITED": _core.WORKER_EXITED,
        "SHMATARI_POOL_STARTING": _core.POOL_STARTING,
        "SHMATARI_POOL_RUNNING": _core.POOL_RUNNING, "SHMATARI_POOL_CLOSING": _core.POOL_CLOSING}
    assert sorted(int(code) for code in status) == sorted(_core.STATUS.values())
    assert status[str(_core.STATUS["abi"])] == "layout ABI mismatch"


def _doc_tables() -> dict:
    """The tables of docs/layout.md whose rows start with a number, by the
    heading above them: {heading: [(number, field, type, *other cells), ...]}."""
    tables, current = {}, None
    for line in DOC.read_text().splitlines():
        if line.startswith("#"):
            m = re.match(r"#+ `?([\w -]+?)`?( \(|$)", line)
            current = m.group(1) if m else None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if current and line.startswith("|") and cells[0].isdigit():
            tables.setdefault(current, []).append((int(cells[0]), *cells[1:]))
    return tables


def test_docs_tables_match_the_header():
    """docs/layout.md gives every member at its offset, and its rows tile each
    struct exactly: no gap, no overlap, no drift from layout.h."""
    layout, tables = _core.struct_layout(), _doc_tables()
    for struct, members in layout.items():
        rows = tables[struct]
        documented = {name: offset for offset, name, *_ in rows}
        wrong = {k: v for k, v in members.items() if k != "sizeof" and documented.get(k) != v}
        assert not wrong, f"{struct}: members missing or at other offsets in the doc: {wrong}"
        pos = 0
        for offset, name, typ, *_ in rows:
            assert offset == pos, f"{struct}.{name} documented at {offset}, expected {pos}"
            base, count = re.fullmatch(r"(\w+)(?:\[(\d+)\])?", typ).groups()
            pos += np.dtype(DOC_TYPES[base]).itemsize * int(count or 1)
        assert pos == members["sizeof"], struct
    fields = [(name, np.dtype(DOC_TYPES[typ]), unit, meaning)
              for _, name, typ, unit, meaning in tables["Per-result arrays"]]
    assert fields == [(name, dtype, unit, meaning)
                      for name, dtype, _, unit, meaning in _core.FIELD_SPECS]


def test_magic_spells_shmatari():
    assert _core.MAGIC.to_bytes(8, "little") == b"SHMATARI"


def _geometry(**kw):
    g = dict(num_envs=8, num_workers=2, batch_size=8, ring_depth=2, stack_num=4,
             img_height=84, img_width=84, channels=1, frame_skip=4, autoreset_mode=0)
    g.update(kw)
    return g


@pytest.mark.parametrize("geometry", [
    _geometry(), _geometry(num_envs=64, batch_size=32, ring_depth=3, num_workers=16),
    _geometry(channels=3, img_height=105, img_width=80, stack_num=1, num_envs=3, batch_size=1,
              ring_depth=4, num_workers=3),
    _geometry(autoreset_mode=_core.AUTORESET_MODES["same_step"]),
    _geometry(autoreset_mode=_core.AUTORESET_MODES["same_step"], channels=3, num_envs=5,
              batch_size=3, ring_depth=3, img_height=7, img_width=5),
])
def test_regions_are_aligned_and_disjoint(geometry):
    buf = bytearray(_core.compute_layout(**geometry))
    total = _core.header_words(buf)["total_bytes"]
    seg_buf = bytearray(total)
    seg_buf[:len(buf)] = buf
    seg = _core.Segment(seg_buf)
    h = seg.header()
    B, D = geometry["batch_size"], geometry["ring_depth"]
    assert h["ring_depth"] == D and h["batch_size"] == B
    regions = [(0, _core.HEADER_BYTES),
               (h["env_ctrl_offset"], h["env_ctrl_offset"] + 64 * h["num_envs"]),
               (h["worker_ctrl_offset"], h["worker_ctrl_offset"] + 64 * h["num_workers"]),
               (h["errors_offset"], h["errors_offset"] + _core.ERROR_BYTES * h["num_workers"])]
    for s in range(D):
        base = seg.slot_offset(s)
        assert base == h["slots_offset"] + s * h["slot_bytes"]
        regions.append((base, base + _core.SLOT_HEADER_BYTES))
        for f, (name, dtype) in enumerate(_core.FIELDS):
            off = base + h["slot_field_offset"][f]
            regions.append((off, off + dtype.itemsize * B))
        obs = base + h["slot_obs_offset"]
        regions.append((obs, obs + h["obs_env_bytes"] * B))
        final = h["slot_final_offset"]
        assert (final != 0) == (geometry["autoreset_mode"] == _core.AUTORESET_MODES["same_step"])
        if final:  # a second copy of the slot's records, at the same relative offsets
            for f, (name, dtype) in enumerate(_core.FIELDS):
                off = base + final + h["slot_field_offset"][f]
                regions.append((off, off + dtype.itemsize * B))
            obs = base + final + h["slot_obs_offset"]
            regions.append((obs, obs + h["obs_env_bytes"] * B))
            assert obs + h["obs_env_bytes"] * B <= base + h["slot_bytes"]
    for start, end in regions:
        assert start % _core.ALIGN == 0
        assert end <= total
    regions.sort()
    for (s0, e0), (s1, _) in zip(regions, regions[1:]):
        assert e0 <= s1, "regions overlap"
    assert h["obs_env_bytes"] == geometry["stack_num"] * geometry["img_height"] * \
        geometry["img_width"] * geometry["channels"]


def test_invalid_geometry_is_refused():
    with pytest.raises(ValueError, match="geometry"):
        _core.compute_layout(**_geometry(ring_depth=1))
    with pytest.raises(ValueError, match="geometry"):
        _core.compute_layout(**_geometry(num_workers=9))
    with pytest.raises(ValueError, match="geometry"):
        _core.compute_layout(**_geometry(autoreset_mode=3))
    with pytest.raises(ValueError, match="batch_order"):
        _core.compute_layout(**_geometry(batch_order=2))
    # (1.3) fixed order: batch_size divides num_envs
    _core.compute_layout(**_geometry(num_envs=8, batch_size=4, ring_depth=3,
                                     batch_order=_core.BATCH_ORDERS["fixed"]))
    with pytest.raises(ValueError, match="batch_order"):
        _core.compute_layout(**_geometry(num_envs=8, batch_size=3, ring_depth=4,
                                         batch_order=_core.BATCH_ORDERS["fixed"]))


def test_segment_refuses_foreign_headers():
    buf = bytearray(_core.compute_layout(**_geometry()))
    total = _core.header_words(buf)["total_bytes"]
    data = bytearray(total)
    data[:len(buf)] = buf
    _core.Segment(data)
    bad = bytearray(data)
    bad[0:8] = b"NOTATARI"
    with pytest.raises(ValueError, match="not a shmatari segment"):
        _core.Segment(bad)
    bad = bytearray(data)
    bad[8:12] = (_core.ABI_MAJOR + 1).to_bytes(4, "little")
    with pytest.raises(ValueError, match="ABI"):
        _core.Segment(bad)
    with pytest.raises(ValueError, match="smaller"):
        _core.Segment(data[: total - 1])
    assert np.dtype(_core.FIELDS[0][1]) == np.int32


def test_c_client_under_strict_c11_after_a_system_header_says_what_to_do(tmp_path):
    """A C trainer that includes <stdio.h> before shmatari.h and builds with
    -std=c11 (the header says "C11"): glibc's feature macros are fixed by
    then, and the build failed with a screen of implicit declarations of
    syscall, clock_gettime, O_CLOEXEC... One #error now says what to do."""
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("the feature-macro check is glibc's")
    cc = next((c for c in map(shutil.which, ("cc", "gcc", "clang")) if c), None)
    if cc is None:
        pytest.skip("no C compiler on this machine")
    src = tmp_path / "late.c"
    src.write_text('#include <stdio.h>\n#include "shmatari/shmatari.h"\n'
                   "int main(void) { shmatari_client c; (void)c; return 0; }\n")
    res = subprocess.run([cc, "-std=c11", "-fsyntax-only", f"-I{INCLUDE}", str(src)],
                         capture_output=True, text=True)
    assert res.returncode != 0
    # the first diagnostic is the #error (the compiler goes on after it)
    first = next(line for line in res.stderr.splitlines() if "error" in line or "warning" in line)
    assert "include it before any system header" in first, res.stderr[-1500:]


@pytest.mark.parametrize("opt", ["-O1", "-O2", "-O3"])
def test_c_clients_compile_warning_free_when_optimized_without_sanitizers(opt, tmp_path):
    """gcc warns 'may be used uninitialized' only when it optimizes and only
    without -fsanitize, and the tests' programs are built sanitized: an
    attach split into functions (23cc7fc) broke every -Werror build of a
    client at -O1 and up, and no test saw it (a review, 2026-12-06). The C++
    example and a C client that calls every entry point, compiled as a user
    would, with no sanitizer."""
    builds = [(COMPILERS["c++"], ["-x", "c++", "-std=c++17"],
               ROOT / "examples" / "cpp_trainer" / "trainer.cpp"),
              (COMPILERS["c"], ["-std=c11"], ROOT / "tests" / "c" / "client_alternate.c")]
    for names, std, src in builds:
        cc = next((c for c in map(shutil.which, names) if c), None)
        if cc is None:
            pytest.skip(f"no compiler of {names} on this machine")
        proc = subprocess.run([cc, *std, opt, *STRICT, "-c", str(src), "-o",
                               str(tmp_path / (src.stem + ".o"))],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{src.name} {opt}: {proc.stderr[-3000:]}"
