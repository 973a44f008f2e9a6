"""The layout contract: C and Python read the same offsets."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

from shmatari import _core

ROOT = pathlib.Path(__file__).resolve().parents[1]
INCLUDE = ROOT / "csrc" / "include"


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler on this machine")
    exe = tmp_path_factory.mktemp("layout") / "layout_dump"
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", f"-I{INCLUDE}",
                    str(ROOT / "tests" / "c" / "layout_dump.c"), "-o", str(exe)], check=True)
    return json.loads(subprocess.run([str(exe)], check=True, capture_output=True,
                                     text=True).stdout)


def test_struct_offsets_agree_between_c_and_python(c_layout):
    constants = c_layout.pop("constants")
    assert c_layout == _core.struct_layout()
    assert constants == {"magic": _core.MAGIC, "abi_major": _core.ABI_MAJOR,
                         "header_bytes": _core.HEADER_BYTES, "field_count": len(_core.FIELDS)}


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
    total = int.from_bytes(buf[24:32], "little")
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


def test_segment_refuses_foreign_headers():
    buf = bytearray(_core.compute_layout(**_geometry()))
    total = int.from_bytes(buf[24:32], "little")
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
