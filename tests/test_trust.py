"""Issue 13: nothing in a segment is trusted (docs/layout.md, "Trust").

The crafted segments of the issue, as named regression tests on both
clients: the Python one (``shmatari.attach``, ``_core.Segment``) and the C
one (``tests/c/trust_cases.c`` and the fuzz target ``tests/c/attach_fuzz.c``,
built with AddressSanitizer and UBSan); squatting before ``shmatari serve``;
and, when the tests run as root, a second, unprivileged user.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import shmatari
from conftest import SANITIZE, build_sanitized, c_compiler, pid_alive
from shmatari import _core, cli, shm

ROOT = Path(__file__).resolve().parents[1]
INCLUDE = ROOT / "csrc" / "include"
LINUX = sys.platform.startswith("linux")
#: Seconds the fuzzer runs in the core suite (CI); longer runs by hand:
#: SHMATARI_FUZZ_SECONDS=600 pytest tests/test_trust.py -k fuzz -s
FUZZ_SECONDS = int(os.environ.get("SHMATARI_FUZZ_SECONDS", "5"))

GEOMETRY = dict(num_envs=4, num_workers=2, batch_size=4, ring_depth=2, stack_num=2,
                img_height=8, img_width=8, channels=1, frame_skip=4)
#: ABI 1.2: RGB planar, and a render area of 10 x 12 screens.
RENDER_GEOMETRY = dict(GEOMETRY, channels=3, obs_layout=1, screen_height=10, screen_width=12)
#: ABI 1.3: a RAM area after the render area.
RAM_GEOMETRY = dict(RENDER_GEOMETRY, ram_bytes=128)
SEED_GEOMETRIES = [
    GEOMETRY,
    dict(num_envs=6, num_workers=3, batch_size=2, ring_depth=4, stack_num=1, img_height=5,
         img_width=7, channels=3, frame_skip=1, autoreset_mode=1),
    dict(num_envs=3, num_workers=1, batch_size=1, ring_depth=4, stack_num=4, img_height=84,
         img_width=84, channels=1, frame_skip=4, autoreset_mode=2),
    RENDER_GEOMETRY,
    RAM_GEOMETRY,
]


def _u64(buf, off, value):
    buf[off:off + 8] = (value % 2**64).to_bytes(8, "little")


def _u32(buf, off, value):
    buf[off:off + 4] = (value % 2**32).to_bytes(4, "little")


def _word(buf, off, n=8):
    return int.from_bytes(buf[off:off + n], "little")


def segment_bytes(geometry=GEOMETRY, owner_pid=None) -> bytearray:
    """A whole valid segment (header, zeros), as its creator lays it out."""
    header = bytearray(_core.compute_layout(**geometry))
    _u32(header, 336, os.getpid() if owner_pid is None else owner_pid)  # owner_pid
    return header + bytearray(_word(header, 24) - len(header))


def _cc(*names):
    return next((c for c in map(shutil.which, names) if c), None)


def _build(tmp_path, source: str, out: str, cc=None, extra=()) -> Path:
    cc = cc or _cc("cc", "gcc", "clang")
    if cc is None:
        pytest.skip("no C compiler (cc, gcc or clang) on this machine")
    exe = tmp_path / out
    res = subprocess.run([cc, "-std=gnu11", "-g", "-O1", "-Wall", "-Wextra", "-Werror",
                          *SANITIZE, *extra, f"-I{INCLUDE}", str(ROOT / "tests" / "c" / source),
                          "-o", str(exe)], capture_output=True, text=True)
    if res.returncode != 0 and "sanitize" in res.stderr:
        pytest.skip(f"{cc} cannot build with -fsanitize=address,undefined: {res.stderr[-300:]}")
    assert res.returncode == 0, res.stderr
    return exe


# -- crafted headers: each is refused, by the Python and the C check alike ------------

def _craft(name):
    buf = segment_bytes()
    total = len(buf)
    obs_off = _word(buf, 128)
    if name == "ring_times_slot_bytes_wraps":
        _u64(buf, 88, 2**63)
    elif name == "env_ctrl_offset_wraps":
        _u64(buf, 96, -64)
    elif name == "worker_ctrl_offset_wraps":
        _u64(buf, 104, -64)
    elif name == "errors_offset_before_the_mapping":
        _u64(buf, 112, -_core.ERROR_BYTES)
    elif name == "slots_offset_wraps":
        _u64(buf, 120, -1024)
    elif name == "obs_frame_bytes_wraps_to_zero":
        _u32(buf, 52, 2**31), _u32(buf, 56, 2**31), _u32(buf, 60, 4)
        _u64(buf, 72, 0), _u64(buf, 80, 0)
    elif name == "result_field_after_obs":
        _u64(buf, 136 + 8 * 1, obs_off + 64)  # reward
    elif name == "final_records_without_same_step":
        _u64(buf, 392, _word(buf, 88))
    elif name == "num_envs_beyond_the_maximum":
        _u32(buf, 32, 2**26), _u32(buf, 40, 2**26), _u32(buf, 36, 1)
    elif name == "file_smaller_than_total_bytes":
        return buf[:total - 64]
    elif name == "file_larger_than_total_bytes":
        return buf + bytearray(64)
    elif name == "num_actions_beyond_18":
        _u32(buf, 68, 19)
    elif name == "total_bytes_too_small_for_the_slots":
        _u64(buf, 24, total - 64)
        return buf[:total - 64]
    else:
        raise KeyError(name)
    return buf


CRAFTED = ["ring_times_slot_bytes_wraps", "env_ctrl_offset_wraps", "worker_ctrl_offset_wraps",
           "errors_offset_before_the_mapping", "slots_offset_wraps",
           "obs_frame_bytes_wraps_to_zero", "result_field_after_obs",
           "final_records_without_same_step", "num_envs_beyond_the_maximum",
           "file_smaller_than_total_bytes", "file_larger_than_total_bytes",
           "num_actions_beyond_18", "total_bytes_too_small_for_the_slots"]


def _craft_render(name):
    """ABI 1.2's render area, crafted: its words are checked like the rest."""
    buf = segment_bytes(RENDER_GEOMETRY)
    if name == "render_area_over_the_slots":
        _u64(buf, 488, _word(buf, 120))  # render_offset = slots_offset
    elif name == "render_env_bytes_wraps":
        _u64(buf, 496, 2**62)
    elif name == "screen_without_a_render_area":
        buf = segment_bytes()
        _u32(buf, 504, 210), _u32(buf, 508, 160)
    elif name == "screen_height_without_width":
        _u32(buf, 508, 0)
    elif name == "screen_beyond_the_maximum":
        _u32(buf, 504, 2**31)
    elif name == "obs_layout_unknown":
        _u32(buf, 388, 7)
    elif name.startswith("ram_"):
        buf = segment_bytes(RAM_GEOMETRY)
        if name == "ram_area_over_the_render_area":
            _u64(buf, 408, _word(buf, 488))  # ram_offset = render_offset
        elif name == "ram_offset_wraps":
            _u64(buf, 408, 2**64 - 64)
        elif name == "ram_area_past_the_segment":
            _u64(buf, 408, _word(buf, 24) - 64)
        elif name == "ram_bytes_not_128":
            _u32(buf, 416, 64)
        else:
            raise KeyError(name)
    else:
        raise KeyError(name)
    return buf


RENDER_CRAFTED = ["render_area_over_the_slots", "render_env_bytes_wraps",
                  "screen_without_a_render_area", "screen_height_without_width",
                  "screen_beyond_the_maximum", "obs_layout_unknown",
                  "ram_area_over_the_render_area", "ram_offset_wraps",
                  "ram_area_past_the_segment", "ram_bytes_not_128"]


def test_render_geometry_passes_and_is_taken_from_the_check():
    buf = segment_bytes(RENDER_GEOMETRY)
    seg = _core.Segment(buf)
    before = seg.header()
    assert before["render_offset"] >= before["slots_offset"] + 2 * before["slot_bytes"]
    assert before["render_env_bytes"] % 64 == 0
    assert before["render_env_bytes"] >= _core.RENDER_PALETTE_BYTES + 10 * 12
    for off in (488, 496):
        _u64(buf, off, 2**64 - 64)
    _u32(buf, 504, 4000), _u32(buf, 508, 4000)
    after = seg.header()
    for key in ("render_offset", "render_env_bytes", "screen_height", "screen_width"):
        assert after[key] == before[key], key


def test_ram_geometry_passes_and_is_taken_from_the_check():
    buf = segment_bytes(RAM_GEOMETRY)
    seg = _core.Segment(buf)
    before = seg.header()
    assert before["ram_bytes"] == _core.RAM_BYTES == 128
    assert before["ram_offset"] == before["render_offset"] + 4 * before["render_env_bytes"]
    assert before["ram_offset"] + 4 * 128 == before["total_bytes"] == len(buf)
    _u64(buf, 408, 2**64 - 64), _u32(buf, 416, 2**32 - 1)
    after = seg.header()
    assert (after["ram_offset"], after["ram_bytes"]) == (before["ram_offset"], 128)
    # A 1.2 pool has no RAM area, whatever those (then reserved) words hold.
    buf = segment_bytes(RENDER_GEOMETRY)
    _u64(buf, 408, 1024), _u32(buf, 416, 128)
    _u32(buf, 12, 2)
    assert _core.check_header(buf)[0] == _core.OK
    assert (_core.Segment(buf).header()["ram_offset"], _core.Segment(buf).header()["ram_bytes"]) \
        == (0, 0)


@pytest.mark.parametrize("case", CRAFTED + RENDER_CRAFTED)
def test_crafted_header_is_refused_by_the_python_client(case):
    buf = _craft(case) if case in CRAFTED else _craft_render(case)
    code, msg = _core.check_header(buf)
    assert code == _core.STATUS["not_shmatari"], msg
    assert msg.startswith("not a shmatari segment")
    with pytest.raises(ValueError, match="not a shmatari segment"):
        _core.Segment(buf)


def test_words_of_a_later_minor_are_not_read_in_an_older_pool():
    """layout.md, "Versioning": a word a minor version added is reserved in a
    pool of a lower minor, and MUST NOT be read. A 1.1 header with 1.2 words
    set was read as a planar RGB pool with a render area (a 1.1 client reads
    the same bytes as channels last, without one); a 1.0 header's
    autoreset_mode was read as 1.1's."""
    buf = segment_bytes(dict(GEOMETRY, channels=3, obs_layout=1))
    _u32(buf, 12, 1)  # abi_minor 1
    assert _core.check_header(buf)[0] == _core.OK
    assert _core.Segment(buf).header()["obs_layout"] == 0  # channels last, as 1.1 says
    buf = segment_bytes(RENDER_GEOMETRY)
    _u32(buf, 12, 1)
    assert _core.check_header(buf)[0] == _core.OK
    h = _core.Segment(buf).header()
    assert (h["obs_layout"], h["screen_height"], h["screen_width"], h["render_offset"],
            h["render_env_bytes"]) == (0, 0, 0, 0, 0)
    buf = segment_bytes(dict(GEOMETRY, autoreset_mode=2))
    _u32(buf, 12, 0)  # abi_minor 0: autoreset_mode is a reserved word
    assert _core.Segment(buf).header()["autoreset_mode"] == 0
    buf = segment_bytes(dict(GEOMETRY, autoreset_mode=1))  # same-step slots in a 1.0 pool
    _u32(buf, 12, 0)
    code, msg = _core.check_header(buf)
    assert code == _core.STATUS["not_shmatari"] and "slot_bytes" in msg, msg


def test_valid_segment_passes_and_its_geometry_is_copied_once():
    buf = segment_bytes()
    seg = _core.Segment(buf)
    before = seg.header()
    # A hostile rewrite of every geometry word after the check changes nothing
    # the client computes with.
    for off in range(24, 136, 8):
        _u64(buf, off, 2**64 - 1 - off)
    after = seg.header()
    for key in ("num_envs", "batch_size", "ring_depth", "slot_bytes", "slots_offset",
                "slot_obs_offset", "slot_field_offset", "obs_env_bytes", "total_bytes"):
        assert after[key] == before[key], key
    assert seg.slot_offset(1) == before["slots_offset"] + before["slot_bytes"]
    seg.clear_slots()
    assert seg.in_flight().shape == (GEOMETRY["num_envs"],)


def test_layout_compute_refuses_absurd_geometries_with_the_byte_count():
    with pytest.raises(ValueError, match="stack_num"):  # once passed as 176 MB
        _core.compute_layout(**dict(GEOMETRY, num_envs=2**20, batch_size=2**20,
                                    stack_num=2**30))
    with pytest.raises(ValueError, match=r"need \d+ bytes \(limit 1099511627776\)"):
        _core.compute_layout(**dict(GEOMETRY, num_envs=_core.MAX_ENVS,
                                    batch_size=_core.MAX_ENVS, num_workers=1,
                                    stack_num=_core.MAX_STACK, img_height=2048,
                                    img_width=2048, channels=3))


def test_worker_written_env_id_out_of_range_is_refused_before_use():
    buf = segment_bytes()
    seg = _core.Segment(buf)
    env_id_off = seg.slot_offset(0) + seg.header()["slot_field_offset"][0]
    buf[env_id_off:env_id_off + 16] = np.array([0, 1, 999, 3], np.int32).tobytes()
    with pytest.raises(ValueError, match="env_id 999, outside 0..3"):
        seg.collect(0, None)
    buf[env_id_off + 8:env_id_off + 12] = np.int32(-1).tobytes()
    with pytest.raises(ValueError, match="env_id -1"):
        seg.collect(0, None)


def test_collect_writes_only_into_an_observation_buffer_of_the_batchs_size():
    """Segment.collect copies a batch's observations (batch_size x stack x h x
    w bytes) through a pointer: a buffer of another size, type or layout is
    refused before anything is written, and one of the right size receives
    the slot's bytes, whatever its shape."""
    buf = segment_bytes()
    seg = _core.Segment(buf)
    g = GEOMETRY
    size = g["batch_size"] * g["stack_num"] * g["img_height"] * g["img_width"]
    obs_at = seg.slot_offset(0) + seg.header()["slot_obs_offset"]
    pattern = bytes(i % 251 for i in range(size))
    buf[obs_at:obs_at + size] = pattern
    bad = [np.zeros(size - 1, np.uint8), np.zeros(size + 1, np.uint8),
           np.zeros(size, np.int8), np.zeros(size // 4, np.int32),
           np.zeros(2 * size, np.uint8)[::2], np.zeros(size, np.uint8).reshape(16, -1).T]
    readonly = np.zeros(size, np.uint8)
    readonly.flags.writeable = False
    for out in bad + [readonly]:
        before = out.copy()
        with pytest.raises(ValueError, match=f"collect needs a C-contiguous writeable uint8 "
                                             f"array of {size} bytes"):
            seg.collect(0, out)
        np.testing.assert_array_equal(out, before)
    for shape in [(size,), (g["batch_size"], g["stack_num"], g["img_height"], g["img_width"])]:
        out = np.zeros(shape, np.uint8)
        fields, _ = seg.collect(0, out)
        assert out.tobytes() == pattern
        assert set(fields) == set(_core.COLLECTED)


def test_the_send_pointer_path_takes_only_what_as_int32_makes():
    """Segment.client_send reads its arrays through their pointers: anything
    but a 1-D C-contiguous native int32 array is refused (ValueError),
    before the state machine looks at it."""
    seg = _core.Segment(segment_bytes())
    good = np.zeros(2, np.int32)
    for bad in [np.zeros(2, np.int64), np.zeros(4, np.int32)[::2], np.zeros((1, 2), np.int32),
                np.zeros(2, ">i4")]:
        with pytest.raises(ValueError, match="must be a 1-D C-contiguous native int32"):
            seg.client_send(bad, None)
        with pytest.raises(ValueError, match="must be a 1-D C-contiguous native int32"):
            seg.client_send(good, bad)
    with pytest.raises(ValueError, match=r"actions must have shape \(3,\) \(one per env id\)"):
        seg.client_send(good, np.zeros(3, np.int32))


def test_more_than_2_to_the_32_actions_are_refused_not_cut_to_their_low_bits(tmp_path):
    """client_send narrows the count to the C client's uint32 after comparing
    the whole lengths: 2**32 + 3 actions against 3 env ids were compared as
    3 (a reviewer's reading of the pointer path), and the first 3 went out.
    The arrays are a sparse file's mapping: nothing of their 16 GiB is read
    or written."""
    seg = _core.Segment(segment_bytes())
    path = tmp_path / "sparse"
    with open(path, "wb") as f:
        f.truncate(4 * (2 ** 32 + 3))
    huge = np.memmap(path, np.int32, "r+", shape=(2 ** 32 + 3,))
    with pytest.raises(ValueError, match=r"actions must have shape \(3,\) \(one per env id\), "
                                         r"got \(4294967299,\)"):
        seg.client_send(huge, np.zeros(3, np.int32))
    with pytest.raises(ValueError, match=r"actions must have shape \(4,\) or fewer \(one per "
                                         r"env\), got \(4294967299,\)"):
        seg.client_send(huge, None)
    del huge


def test_worker_error_text_is_bounded_without_a_nul():
    buf = segment_bytes()
    seg = _core.Segment(buf)
    errors = seg.header()["errors_offset"]
    buf[errors:errors + _core.ERROR_BYTES] = b"x" * _core.ERROR_BYTES  # no NUL at all
    assert seg.worker_error(0) == "x" * (_core.ERROR_BYTES - 1)


HOSTILE_ERROR = ("Traceback\n\tline 1\n\x1b[2J\x1b[H\x1b]0;pwned\x07all good\r"
                 "fake: finished OK\n\x1b[8mhidden \x7f\u009b2J caf\u00e9 \u2713")
#: The bidirectional formatting characters both clients escape (a class).
BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
#: A worker's text that forges the lines of serve's log and reorders what a
#: terminal shows (the attacker's pass of 2026-12-03).
FORGED_ERROR = ("ok\nshmatari serve: client pid 4242 detached\nshmatari serve: stopping\n"
                "\u202eevil\u202c \u2066x\u2069 \u200fy\u200e \u061cz caf\u00e9")


def _worker_error_read_back(text: str) -> str:
    """``text`` written as worker 0's error text, as the Python client reads it."""
    buf = segment_bytes()
    seg = _core.Segment(buf)
    errors = seg.header()["errors_offset"]
    data = text.encode()
    buf[errors:errors + len(data) + 1] = data + b"\0"
    return seg.worker_error(0)


def test_worker_error_text_has_its_control_characters_escaped():
    """Any process of the user can write the error text: escape sequences in
    it must not reach a terminal through a message or a log."""
    text = _worker_error_read_back(HOSTILE_ERROR)
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", text), repr(text)
    assert text == ("Traceback\n\tline 1\n\\x1b[2J\\x1b[H\\x1b]0;pwned\\x07all good\\x0d"
                    "fake: finished OK\n\\x1b[8mhidden \\x7f\\x9b2J caf\u00e9 \u2713")


def test_worker_error_text_cannot_forge_lines_or_reorder_the_terminal():
    """A worker's text keeps its lines, each quoted ("| ") in the message,
    so that none passes for a line of serve's log; bidi controls escaped."""
    text = _worker_error_read_back(FORGED_ERROR)
    assert not re.search(f"[{BIDI}]", text), repr(text)
    assert "\\u202eevil\\u202c \\u2066x\\u2069 \\u200fy\\u200e \\u061cz caf\u00e9" in text
    err = shmatari.WorkerError.of("worker 0", 7, range(0, 2), "failed", worker=0,
                                  traceback=text)
    lines = str(err).splitlines()
    assert lines[:2] == ["worker 0 (pid 7, envs 0..1) failed", "--- worker traceback ---"]
    assert lines[2:5] == ["| ok", "| shmatari serve: client pid 4242 detached",
                          "| shmatari serve: stopping"]
    assert all(line.startswith("| ") for line in lines[2:]) and len(lines) == 6
    assert err.worker_traceback == text


def _c_quoted(exe, cap: int, cases: list[bytes]) -> list[bytes]:
    out = subprocess.run([str(exe), "--quote", str(cap), *(c.hex() for c in cases)],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    return [bytes.fromhex(line) for line in out[:len(cases)]]


@pytest.mark.parametrize("lang", ["c", "c++"])
def test_c_client_quotes_the_error_texts_lines_and_escapes_bidi(lang, tmp_path):
    """shmatari_printable turns the bidi controls into '?';
    shmatari_quote_lines puts "| " after each newline, fits its output
    whole sequences only, and always ends it with a NUL; and the message
    of shmatari_pool_check for a failed worker whose text forges serve's
    lines is one line of words, then the text's lines quoted, in well-formed
    UTF-8 even where the message is cut."""
    exe = tmp_path / "printable"
    build_sanitized([*c_compiler(lang), f"-I{INCLUDE}",
                     str(ROOT / "tests" / "c" / "printable.c"), "-o", str(exe)])
    forged = FORGED_ERROR.encode()
    got = _c_quoted(exe, 512, [forged])[0].decode("utf-8")
    assert got == ("ok\n| shmatari serve: client pid 4242 detached\n| shmatari serve: stopping"
                   "\n| ???evil??? ???x??? ???y??? ??z caf\u00e9")
    # Cut at every capacity: a prefix of the whole, whole sequences only.
    long = forged + " \u2713\n\u00e9\U0001f600".encode()
    whole = _c_quoted(exe, 4096, [long])[0]
    for cap in range(1, len(whole) + 8):
        part = _c_quoted(exe, cap, [long])[0]
        assert len(part) < cap and whole.startswith(part), (cap, part)
        part.decode("utf-8")
    rng = np.random.default_rng(1)
    cases = [rng.integers(0, 256, int(rng.integers(1, 60)), np.uint8).tobytes()
             for _ in range(200)]
    for cap in (1, 7, 33):
        for part in _c_quoted(exe, cap, cases):
            assert len(part) < cap
            text = part.decode("utf-8")
            assert not re.search(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{BIDI}]", text)
            assert all(line.startswith("| ") for line in text.split("\n")[1:])

    def message(text: bytes, group=(0, 2), state=_core.WORKER_FAILED) -> str:
        buf = segment_bytes()
        seg = _core.Segment(buf)
        seg.set_worker_group(0, *group)
        seg.set_owner(os.getpid())
        hdr = seg.header()
        failed = state == _core.WORKER_FAILED
        _u32(buf, _core.MEMBERS["shmatari_header"]["failed_workers"][0], int(failed))
        wc = hdr["worker_ctrl_offset"] + _core.MEMBERS["shmatari_worker_ctrl"]["state"][0]
        _u32(buf, wc, state)
        buf[hdr["errors_offset"]:hdr["errors_offset"] + len(text) + 1] = text + b"\0"
        path = tmp_path / "segment"
        path.write_bytes(buf)
        out = subprocess.run([str(exe), "--segment", str(path)] + ([] if failed else ["pids"]),
                             capture_output=True, text=True, check=True).stdout.split("\n")
        assert int(out[0]) == _core.STATUS["worker"]
        raw = bytes.fromhex(out[1])
        assert len(raw) < 512
        return raw.decode("utf-8")  # well formed, even where cut

    lines = message(forged).split("\n")
    assert lines[0] == "worker 0 (pid 0, envs 0..1) failed: ok"
    assert lines[1:3] == ["| shmatari serve: client pid 4242 detached",
                          "| shmatari serve: stopping"]
    assert all(line.startswith("| ") for line in lines[1:]) and "?evil?" in lines[3]
    # a worker's group the words do not give is not printed as 0..4294967295
    assert message(b"x", (0, 0)) == "worker 0 (pid 0, envs unknown) failed: x"
    # nor where a worker exited (it printed "envs 0..4294967295 exited")
    assert message(b"", (0, 0), _core.WORKER_EXITED) == "worker 0 (pid 0, envs unknown) exited"
    assert message(b"", (1, 2), _core.WORKER_EXITED) == "worker 0 (pid 0, envs 1..1) exited"
    for ch in ("\u00e9", "\u2713", "\U0001f600"):  # the message cut inside a sequence
        for shift in range(4):
            text = message(("a" * shift + ch * 600).encode())
            assert text.startswith("worker 0 (pid 0, envs 0..1) failed: " + "a" * shift + ch)
            # and said to be cut (a worker's traceback ends with its cause,
            # which a C client lost without a sign: an attacker's pass)
            assert text.endswith(" ...") and len(text.encode()) >= 500, text
    # marked where cut, not where the message fits its 512 bytes exactly;
    # cut by the words before the text too, inside a sequence (a review)
    prefix = len("worker 0 (pid 0, envs 0..1) failed: ")
    assert message(b"x" * (511 - prefix)).endswith("x" * (511 - prefix))
    assert message(b"x" * (512 - prefix)).endswith("x" * (512 - prefix - 5) + " ...")
    for n in range(150, 171):
        assert message(("\u2713" * n).encode()).endswith(
            "\u2713" if 3 * n <= 511 - prefix else " ..."), n
    assert message(b"a\nb" * 100).endswith(" ...") and message(b"a\nb").endswith("| b")


@pytest.mark.parametrize("lang", ["c", "c++"])
def test_c_client_names_the_envs_not_answered_within_any_capacity(lang, tmp_path):
    """shmatari_unanswered_text (what a timed-out wait says, in Python, C and
    xla()): the workers whose envs have a command not acknowledged, eight
    envs each, then "and N more"; envs whose results are in are not named;
    cut at any capacity to a prefix of the whole, always NUL terminated
    (under ASan/UBSan, each output allocated to its capacity)."""
    exe = tmp_path / "printable"
    build_sanitized([*c_compiler(lang), f"-I{INCLUDE}",
                     str(ROOT / "tests" / "c" / "printable.c"), "-o", str(exe)])
    geometry = dict(GEOMETRY, num_envs=20, batch_size=20)

    def texts(unanswered_envs, caps) -> list[str]:
        buf = segment_bytes(geometry)
        seg = _core.Segment(buf)
        seg.set_worker_group(0, 0, 10)
        seg.set_worker_group(1, 10, 20)
        hdr = seg.header()
        _u32(buf, _core.MEMBERS["shmatari_header"]["num_actions"][0], 4)
        req = _core.MEMBERS["shmatari_env_ctrl"]["req_seq"][0]
        for e in unanswered_envs:
            _u32(buf, hdr["env_ctrl_offset"] + 64 * e + req, 1)
        path = tmp_path / "segment"
        path.write_bytes(buf)
        out = subprocess.run([str(exe), "--unanswered", str(path), *map(str, caps)],
                             capture_output=True, text=True, check=True).stdout.split("\n")
        return [bytes.fromhex(line).decode() for line in out[:len(caps)]]

    whole = texts(range(10, 20), [512])[0]
    assert whole == ("worker 1 (pid 0) has not answered envs 10, 11, 12, 13, 14, 15, 16, 17 "
                     "and 2 more (alive, but stopped or busy: a long noop_max, or a stuck "
                     "emulator)")
    caps = list(range(0, len(whole) + 3))
    for cap, part in zip(caps, texts(range(10, 20), caps)):
        assert len(part) < max(cap, 1) and whole.startswith(part), (cap, part)
    assert texts([3, 12], [512])[0] == (
        "worker 0 (pid 0) has not answered env 3; worker 1 (pid 0) has not answered env 12 "
        "(alive, but stopped or busy: a long noop_max, or a stuck emulator)")
    assert texts([], [512])[0] == "no env has a command in flight"


@pytest.mark.parametrize("lang", ["c", "c++"])
def test_c_client_writes_the_error_text_without_control_bytes(lang, tmp_path):
    exe = tmp_path / "printable"
    build_sanitized([*c_compiler(lang), f"-I{INCLUDE}",
                     str(ROOT / "tests" / "c" / "printable.c"), "-o", str(exe)])
    data = HOSTILE_ERROR.encode()
    # Raw bytes an 8-bit terminal acts on (0x9b is CSI), bad and overlong
    # UTF-8 (e0 80 9b would carry 0x9b), a surrogate, past U+10FFFF, a lone
    # lead byte at the end, and random bytes.
    rng = np.random.default_rng(0)
    cases = [data, b"a\x9b2Jb", b"\xe0\x80\x9b", b"\xc0\x9b", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
             b"ok \xc2", b"\xe2\x82\xac \xf0\x9f\x98\x80 ok"]
    cases += [rng.integers(0, 256, int(rng.integers(1, 40)), np.uint8).tobytes()
              for _ in range(300)]
    out = subprocess.run([str(exe), *(c.hex() for c in cases)], capture_output=True,
                         text=True, check=True).stdout.split()
    assert len(out) == len(cases)
    for case, line in zip(cases, out):
        got = bytes.fromhex(line)
        assert len(got) == len(case)
        text = got.decode("utf-8")  # well formed: every bad byte is now "?"
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", text), (case, got)
        try:
            clean = not re.search(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{BIDI}]", case.decode("utf-8"))
        except UnicodeDecodeError:
            clean = False
        assert not clean or got == case  # printable UTF-8 passes unchanged
    assert bytes.fromhex(out[0]).decode() == (
        "Traceback\n\tline 1\n?[2J?[H?]0;pwned?all good?"
        "fake: finished OK\n?[8mhidden ???2J caf\u00e9 \u2713")
    assert bytes.fromhex(out[1]) == b"a?2Jb" and bytes.fromhex(out[2]) == b"???"
    assert bytes.fromhex(out[7]) == cases[7]


_WORKER_GROUP_SCRIPT = """
import mmap, sys
sys.path.insert(0, sys.argv[1])
from test_trust import RENDER_GEOMETRY, _u32, segment_bytes
from shmatari import _core
begin, ncores = map(int, sys.argv[2:4])
src = segment_bytes(RENDER_GEOMETRY)
m = mmap.mmap(-1, len(src))
m[:] = src
seg = _core.Segment(memoryview(m))
h = seg.header()
for e in range(begin, min(begin + ncores, 200)):  # a RESET posted to every env of the
    off = h["env_ctrl_offset"] + 64 * e  # group, those past num_envs included
    if off + 8 <= len(m):
        _u32(m, off, 1), _u32(m, off + 4, _core.CMD_RESET)
cores = [_core.NullCore((8, 8, 3), stack_num=2) for _ in range(ncores)]
try:
    _core.worker_loop(seg, 0, cores, lambda *a: None, lambda: False, begin, poll=0.01)
except ValueError as exc:
    print("refused:", exc)
"""


@pytest.mark.parametrize("group", [(0, 200), (3, 0), (RENDER_GEOMETRY["num_envs"] - 1, 2),
                                   (2**32 - 1, 1)])
def test_worker_group_outside_the_pool_is_refused_before_use(group):
    """A group (its first env, and its cores' count) past num_envs made the
    worker read env words and write render areas outside the mapping
    (SIGSEGV), when the group came from segment words; the group now comes
    from the pool's record, and is bounded all the same, without overflow
    (2**32 - 1 + 1 wraps to 0 in uint32)."""
    res = subprocess.run([sys.executable, "-c", _WORKER_GROUP_SCRIPT, str(ROOT / "tests"),
                          *map(str, group)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, (res.returncode, res.stderr[-2000:])
    assert "refused: worker 0's group of" in res.stdout, res.stdout + res.stderr


# -- the C client: crafted cases and the fuzz target, under ASan and UBSan -------------

def test_c_obs_shape_follows_obs_layout_as_the_python_client(tmp_path):
    """shmatari_obs_shape gave (stack, h, w, 3) for a planar (channels-first)
    RGB pool, whose bytes are (3 * stack, h, w): a C client read the frames
    of a 1.2 pool in another layout than the Python client."""
    src = tmp_path / "obs_shape.c"
    src.write_text('#include "shmatari/shmatari.h"\n'
                   "int main(int argc, char **argv) {\n"
                   "  (void)argc; FILE *f = fopen(argv[1], \"rb\"); static char buf[1 << 20];\n"
                   "  size_t n = fread(buf, 1, sizeof buf, f); fclose(f);\n"
                   "  static shmatari_client c; char msg[512];\n"
                   "  if (shmatari_geom_load(buf, n, &c.geom, msg, sizeof msg)) {\n"
                   "    puts(msg); return 1; }\n"
                   "  uint32_t s[4]; int d = shmatari_obs_shape(&c, s);\n"
                   "  for (int i = 0; i < d; i++) printf(\"%u \", s[i]);\n"
                   "  return 0; }\n")
    res = subprocess.run([_cc("cc", "gcc", "clang") or pytest.skip("no C compiler"),
                          "-std=gnu11", "-Wall", "-Wextra", "-Werror", f"-I{INCLUDE}", str(src),
                          "-o", str(tmp_path / "obs_shape")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    for layout, want in ((0, [2, 8, 8, 3]), (1, [6, 8, 8])):
        seg = tmp_path / f"seg{layout}"
        seg.write_bytes(segment_bytes(dict(GEOMETRY, channels=3, obs_layout=layout)))
        res = subprocess.run([str(tmp_path / "obs_shape"), str(seg)], capture_output=True,
                             text=True, timeout=30)
        assert res.returncode == 0, res.stdout
        assert [int(x) for x in res.stdout.split()] == want, layout


def test_c_client_refuses_every_crafted_segment_under_sanitizers(tmp_path):
    exe = _build(tmp_path, "trust_cases.c", "trust_cases")
    args = [str(exe)] + (["/dev/shm"] if LINUX and os.path.isdir("/dev/shm") else [])
    res = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    passed = re.findall(r"^ok (\w+)$", res.stdout, re.M)
    for case in CRAFTED[:-1]:
        assert case in passed, res.stdout
    # words only another process writes: named, and no wait without end
    assert "failed_workers_with_no_worker_failed_names_the_word" in passed, res.stdout
    if len(args) > 1:
        for case in ("pool_state_that_is_no_state_ends_the_wait", "symlink_is_not_followed", "mode_0666_is_refused", "sparse_file_is_refused",
                     "hole_padded_past_the_end_is_refused",
                     "fifo_is_refused_without_blocking", "own_0600_segment_passes_the_open_checks"):
            assert case in passed, res.stdout
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"shmatari_trust{os.getpid()}")]


def _seed_corpus(directory: Path) -> None:
    directory.mkdir()
    for i, geometry in enumerate(SEED_GEOMETRIES):
        (directory / f"valid{i}").write_bytes(bytes(segment_bytes(geometry)[:1024]) + bytes(64))
    for case in CRAFTED:
        (directory / case).write_bytes(bytes(_craft(case)[:1024]) + bytes(64))
    for case in RENDER_CRAFTED:
        (directory / case).write_bytes(bytes(_craft_render(case)[:1024]) + bytes(64))


def test_fuzz_header_check_and_attach_path_with_libfuzzer(tmp_path):
    clang = _cc("clang")
    if clang is None:
        pytest.skip("clang is not installed (apt-get install clang): libFuzzer needs it; "
                    "test_hypothesis_headers_through_the_c_client covers the same target")
    exe = tmp_path / "attach_fuzz"
    res = subprocess.run([clang, "-g", "-O1", "-fsanitize=fuzzer,address,undefined",
                          "-fno-sanitize-recover=all", f"-I{INCLUDE}",
                          str(ROOT / "tests" / "c" / "attach_fuzz.c"), "-o", str(exe)],
                         capture_output=True, text=True)
    if res.returncode != 0 and ("fuzzer" in res.stderr or "sanitize" in res.stderr):
        pytest.skip(f"clang has no libFuzzer here: {res.stderr[-300:]}")
    assert res.returncode == 0, res.stderr
    corpus = tmp_path / "corpus"
    _seed_corpus(corpus)
    res = subprocess.run([str(exe), f"-max_total_time={FUZZ_SECONDS}", "-print_final_stats=1",
                          "-max_len=4096", str(corpus)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=FUZZ_SECONDS + 120)
    runs = re.search(r"stat::number_of_executed_units:\s*(\d+)", res.stderr)
    cov = re.findall(r"cov: (\d+) ft: (\d+)", res.stderr)
    print(f"libFuzzer: {runs and runs[1]} runs in {FUZZ_SECONDS} s, "
          f"final cov {cov[-1] if cov else None}")
    assert res.returncode == 0, res.stderr[-4000:]
    assert runs is not None and int(runs[1]) > 100
    assert not list(tmp_path.glob("crash-*"))


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("replay"), "attach_fuzz.c", "attach_replay",
                  extra=["-DSHMATARI_FUZZ_REPLAY"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hypothesis_headers_through_the_c_client(replay, tmp_path_factory, data):
    """The fuzz target without libFuzzer: a valid header with some words
    replaced by values hypothesis picks (edge values included), then a hostile
    rewrite; ASan and UBSan must stay quiet."""
    geometry = data.draw(st.sampled_from(SEED_GEOMETRIES))
    header = bytearray(segment_bytes(geometry)[:1024])
    offsets = data.draw(st.lists(st.sampled_from(list(range(16, 400, 4))), max_size=4))
    for off in offsets:
        value = data.draw(st.one_of(st.integers(0, 2**32 - 1),
                                    st.sampled_from([0, 1, 63, 64, 2**31, 2**32 - 1])))
        _u32(header, off, value)
    tail = data.draw(st.binary(max_size=256))
    path = tmp_path_factory.mktemp("h") / "input"
    path.write_bytes(bytes(header) + tail)
    res = subprocess.run([str(replay), str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-4000:]


# -- opening: symlinks, modes, sparse and special files (Python client) ---------------

@pytest.fixture
def shm_name(request):
    """A pool name of this test, and its /dev/shm path, removed afterwards."""
    if not LINUX:
        pytest.skip("the open checks are tested through /dev/shm (Linux)")
    import zlib  # a --name: a letter, 20 characters at most

    name = f"t{os.getpid() % 10**6}x{zlib.crc32(request.node.name.encode()) % 10**8}"
    path = Path("/dev/shm") / f"shmatari_{name}"
    yield name, path
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    elif path.exists() or path.is_symlink():
        path.unlink()


def _write(path: Path, data: bytes, mode=0o600, sparse=False):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        if sparse:
            os.ftruncate(fd, len(data))
            os.pwrite(fd, data[:1024], 0)
        else:
            os.write(fd, data)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _attach_error(name) -> shmatari.AttachError:
    with pytest.raises(shmatari.AttachError) as info:
        shmatari.attach(name, timeout=0.1)
    return info.value


def test_own_0600_segment_passes_the_open_checks(shm_name):
    name, path = shm_name
    _write(path, bytes(segment_bytes()))
    assert _attach_error(name).code == "timeout"  # its pool never runs


@pytest.mark.parametrize("mode", [0o666, 0o640, 0o604])
def test_segment_open_to_other_users_is_refused(shm_name, mode):
    name, path = shm_name
    _write(path, bytes(segment_bytes()), mode=mode)
    err = _attach_error(name)
    assert err.code == "untrusted" and f"mode {mode:04o}" in str(err)


def test_symlink_is_not_followed(shm_name, tmp_path):
    name, path = shm_name
    target = Path("/dev/shm") / f"shmatari_{name}_t"
    _write(target, bytes(segment_bytes()))
    try:
        path.symlink_to(target)
        err = _attach_error(name)
        assert err.code == "untrusted" and "symbolic link" in str(err)
    finally:
        target.unlink()


def test_sparse_file_is_refused(shm_name):
    name, path = shm_name
    _write(path, bytes(segment_bytes()), sparse=True)
    err = _attach_error(name)
    assert err.code == "untrusted" and "sparse" in str(err)


def test_the_trust_policy_is_written_once():
    """Issue 21: the policy and its messages were written twice (shm.py and
    attach.h) and could drift; Python now calls the C check (_core.trust_fd,
    _core.trust_path) and words none of it itself."""
    source = Path(shm.__file__).read_text()
    for text in ("refusing", "st_blocks", "S_ISLNK", "geteuid", "0o077"):
        assert text not in source, text
    assert "_core.trust_fd(" in source and "_core.trust_path(" in source


def _fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    if libc.fallocate(fd, mode, offset, length) != 0:
        err = ctypes.get_errno()
        pytest.skip(f"fallocate(mode {mode}) on /dev/shm: {os.strerror(err)}")


def test_hole_padded_past_the_end_is_refused_by_both_clients(shm_name, tmp_path):
    """Issue 25: a hole inside the segment, padded with as many bytes
    allocated past its end (FALLOC_FL_KEEP_SIZE), passed the "every byte
    allocated" check (st_blocks x 512 >= st_size). Both clients look for
    holes (lseek SEEK_HOLE: the first hole is at the file's size)."""
    name, path = shm_name
    data = bytes(segment_bytes())
    assert len(data) > 2 * 4096
    _write(path, data)
    fd = os.open(path, os.O_RDWR)
    try:
        _fallocate(fd, 0x02 | 0x01, 4096, 4096)  # PUNCH_HOLE | KEEP_SIZE: page 1
        _fallocate(fd, 0x01, len(data), 8192)  # KEEP_SIZE: two pages past the end
        st = os.fstat(fd)
        assert st.st_blocks * 512 >= st.st_size  # what the old check compared
        assert os.lseek(fd, 0, os.SEEK_HOLE) == 4096
    finally:
        os.close(fd)
    err = _attach_error(name)
    assert err.code == "untrusted" and "hole at byte 4096" in str(err), str(err)
    with pytest.raises(shm.UntrustedSegmentError, match="sparse"):
        shm.attach(f"shmatari_{name}")
    # ... and the C client, with the same message (one policy, in attach.h).
    src = tmp_path / "attach.c"
    src.write_text('#include "shmatari/shmatari.h"\nint main(int c, char **v) {\n'
                   '  (void)c; shmatari_client cl; int r = shmatari_attach(&cl, v[1], 0);\n'
                   '  printf("%d %s\\n", r, cl.error); return 0; }\n')
    exe = tmp_path / "attach"
    cc = _cc("cc", "gcc", "clang") or pytest.skip("no C compiler")
    build_sanitized([cc, "-std=gnu11", "-Wall", "-Wextra", "-Werror", f"-I{INCLUDE}", str(src),
                     "-o", str(exe)])
    res = subprocess.run([str(exe), name], capture_output=True, text=True, timeout=60)
    code, _, msg = res.stdout.partition(" ")
    assert int(code) == _core.STATUS["untrusted"], res.stdout + res.stderr
    assert msg.strip() == str(err).partition(": ")[2], (msg, str(err))


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_special_file_is_refused_without_blocking(shm_name, kind):
    name, path = shm_name
    os.mkfifo(path, 0o600) if kind == "fifo" else path.mkdir(0o700)
    err = _attach_error(name)
    assert err.code == "untrusted" and "not a regular file" in str(err)


def test_header_rewritten_after_attach_changes_nothing_the_client_computes(no_leaks):
    with shmatari.make("Pong", num_envs=2, seed=3) as env:
        env.reset(seed=3)
        buf = env._res.segment.buf
        saved = bytes(buf[24:136])
        for off in range(24, 136, 8):  # every size and offset word
            buf[off:off + 8] = (2**64 - 8 - off).to_bytes(8, "little")
        try:
            for _ in range(5):
                obs, reward, *_ = env.step(np.zeros(2, np.int64))
            assert obs.shape == (2, 4, 84, 84) and reward.shape == (2,)
        finally:
            buf[24:136] = saved


# -- squatting before `shmatari serve` -------------------------------------------------

def _free(name) -> str:
    """What cli._free_name says (its SystemExit text), or "" if it freed the name."""
    try:
        cli._free_name(f"shmatari_{name}")
    except SystemExit as exc:
        text = str(exc)
        assert "\n" not in text and text.startswith("shmatari serve: ")
        return text
    return ""


def test_squat_symlink_fifo_directory_give_one_line_errors(shm_name):
    name, path = shm_name
    path.symlink_to("/etc/passwd")
    assert "symbolic link" in _free(name)
    assert Path("/etc/passwd").exists() and path.is_symlink()  # nothing removed
    path.unlink()
    os.mkfifo(path, 0o600)
    assert "not a regular file" in _free(name)
    path.unlink()
    path.mkdir(0o700)
    assert "not a regular file" in _free(name)


def test_squat_of_our_own_garbage_is_left_alone_with_one_line(shm_name):
    name, path = shm_name
    _write(path, b"not a pool" * 200)
    assert "not a shmatari pool" in _free(name)
    assert path.exists()


def test_stale_squat_naming_a_live_pid_is_recognised_and_removed(shm_name, capsys):
    name, path = shm_name
    # A header naming pid 1 (alive, started long before): nobody maps the
    # file, so no live server owns it.
    _write(path, bytes(segment_bytes(owner_pid=1)))
    assert _free(name) == ""
    assert not path.exists()
    # the log says why without calling pid 1 gone (it said "left by a server
    # that is gone (pid 1)" until 2026-12-07: an attacker's pass)
    err = capsys.readouterr().err
    assert "gone" not in err and "no process holds it" in err, err


def test_squat_with_a_recycled_pid_is_removed(shm_name):
    name, path = shm_name
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        # The file predates the process that now has its owner's pid.
        _write(path, bytes(segment_bytes(owner_pid=child.pid)))
        os.utime(path, (1, 1))
        assert _free(name) == ""
        assert not path.exists()
    finally:
        child.kill()
        child.wait()


def test_serve_squatted_by_a_symlink_exits_with_one_line(shm_name):
    name, path = shm_name
    path.symlink_to("/dev/null")
    res = subprocess.run([sys.executable, "-m", "shmatari.cli", "serve", "Pong", "--num-envs",
                          "1", "--name", name], capture_output=True, text=True, timeout=120)
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    assert res.stderr.strip().count("\n") == 0 and "symbolic link" in res.stderr


# -- two users --------------------------------------------------------------------------

OTHER_USER = "shmatari_t13"


@pytest.fixture(scope="module")
def other_user():
    """An unprivileged user (created here when running as root)."""
    if not LINUX or os.geteuid() != 0:
        pytest.skip("the two-user test creates a user: it needs root")
    if shutil.which("useradd") is None:
        pytest.skip("useradd is missing")
    try:
        pw = pwd.getpwnam(OTHER_USER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        OTHER_USER], check=True, capture_output=True)
        pw = pwd.getpwnam(OTHER_USER)
    return pw.pw_uid, pw.pw_gid


@pytest.fixture
def public_dir():
    """A directory the other user can read (pytest's tmp_path is root's, 0700)."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="shmatari_t13_"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d)


def _as(uid_gid, args, **kw):
    uid, gid = uid_gid

    def drop():
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    return subprocess.run(args, preexec_fn=drop, capture_output=True, text=True, timeout=60,
                          **kw)


def test_two_users_spoofed_segment_and_symlink_are_refused(other_user, shm_name, public_dir):
    name, path = shm_name
    spoof = segment_bytes()
    _u32(spoof, 344, _core.POOL_RUNNING)  # pool_state: a pool that answers
    src = public_dir / "spoof.bin"
    src.write_bytes(spoof)
    src.chmod(0o644)
    # The other user creates a world-writable segment with a valid header.
    code = ("import os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666);"
            "os.fchmod(fd, 0o666); os.write(fd, open(sys.argv[2], 'rb').read())")
    res = _as(other_user, ["/usr/bin/python3", "-c", code, str(path), str(src)])
    assert res.returncode == 0, res.stderr
    assert path.stat().st_uid == other_user[0]
    err = _attach_error(name)
    assert err.code == "untrusted" and f"belongs to uid {other_user[0]}" in str(err)
    path.unlink()
    # ... and a symlink to one of ours.
    ours = Path("/dev/shm") / f"shmatari_{name}_o"
    _write(ours, bytes(segment_bytes()))
    try:
        res = _as(other_user, ["/usr/bin/python3", "-c",
                               "import os, sys; os.symlink(sys.argv[1], sys.argv[2])",
                               str(ours), str(path)])
        assert res.returncode == 0, res.stderr
        err = _attach_error(name)
        assert err.code == "untrusted" and "symbolic link" in str(err)
    finally:
        ours.unlink()


def test_two_users_another_users_segment_is_refused_by_the_c_client(other_user, shm_name,
                                                                    public_dir):
    """Our segment (0600, ours) seen by the other user's C client: an
    AttachError-like refusal naming the owner, not a bare permission error."""
    name, path = shm_name
    _write(path, bytes(segment_bytes()))
    src = public_dir / "attach.c"
    src.write_text('#include "shmatari/shmatari.h"\nint main(int c, char **v) {\n'
                   '  shmatari_client cl; int r = shmatari_attach(&cl, v[1], 0);\n'
                   '  printf("%d %s\\n", r, cl.error); return 0; }\n')
    cc = _cc("cc", "gcc", "clang")
    if cc is None:
        pytest.skip("no C compiler")
    exe = public_dir / "attach"
    subprocess.run([cc, "-std=gnu11", f"-I{INCLUDE}", str(src), "-o", str(exe)], check=True)
    res = _as(other_user, [str(exe), name])
    code, _, msg = res.stdout.partition(" ")
    assert int(code) == _core.STATUS["untrusted"], res.stdout + res.stderr
    assert "belongs to uid 0" in msg


# -- a concurrent writer (issue 25: double fetch) ------------------------------------------

@pytest.mark.parametrize("batch_size", [None, 4], ids=["sync", "async"])
def test_concurrent_writer_cannot_make_the_c_client_overflow(tmp_path, batch_size):
    """Issue 25: a process of the same user toggling a ring row's env_id
    while the C client calls shmatari_send(&c, acts, b.env_id, b.size) (b.env_id
    points into the segment) made it index its own arrays with the new,
    unchecked value (ASan: heap-buffer-overflow in shmatari_client_post). A
    thread flips env_id rows, flags, done counts, header and worker words of
    a real pool while the client steps it (tests/c/concurrent_writer.c), under
    ASan and UBSan: refusals, timeouts and re-attaches are fine, an access
    outside the client's memory aborts. The client steps one clean round
    before the writer starts (under load a caught flip stops the server, or
    spoils every batch, before the first: a run of 0 steps failed CI once).
    Longer runs: SHMATARI_FUZZ_SECONDS."""
    from test_server import Server

    exe = _build(tmp_path, "concurrent_writer.c", "concurrent_writer", extra=["-pthread"])
    args = ["--batch-size", str(batch_size)] if batch_size else []
    s = Server(tmp_path, *args, num_envs=8, num_workers=2)
    try:
        res = subprocess.run([str(exe), s.name, str(FUZZ_SECONDS), "1"], capture_output=True,
                             text=True, timeout=FUZZ_SECONDS + 120)
        print(f"concurrent writer ({FUZZ_SECONDS} s): {res.stdout.strip()}")
        assert res.returncode == 0, res.stdout + res.stderr[-4000:]
        m = re.search(r"^steps (\d+) .* flips (\d+)$", res.stdout, re.M)
        assert m and int(m[1]) > 0 and int(m[2]) > 0, res.stdout + s.stderr()[-2000:]
    finally:
        s.stop()
    s.assert_gone()


_PY_FLIPPER = """
import mmap, os, random, sys, time
import numpy as np
path, seconds, num_envs = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
rows = [tuple(map(int, r.split(":"))) for r in sys.argv[4:]]  # offset:count
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, 0)
ids = [np.frombuffer(m, np.int32, n, off) for off, n in rows]
rng = random.Random(1)
bad = [num_envs, num_envs + 7, 2**31 - 1, -1, -2**31, 0]
flips, end = 0, time.monotonic() + seconds
print("flipping", flush=True)
while time.monotonic() < end:
    a = ids[rng.randrange(len(ids))]
    i = rng.randrange(a.size)
    old = int(a[i])
    a[i] = rng.choice(bad)  # a toggle: bad for a moment, then back
    a[i] = old
    flips += 1
    if flips % 16 == 0:
        time.sleep(0.001)
del ids, a
m.close()
print("flips", flips)
"""

_PY_CLIENT = """
import sys
import numpy as np
import shmatari
from shmatari.errors import ShmatariError
seconds = float(sys.argv[1])
flipper = sys.argv[2:]
import subprocess, time
env = shmatari.make("Pong", num_envs=8, batch_size=4, seed=1)
h = env._client._seg.header()
rows = [f"{env._client._seg.slot_offset(s) + h['slot_field_offset'][0]}:{h['batch_size']}"
        for s in range(h["ring_depth"])]
proc = subprocess.Popen([sys.executable, "-c", flipper[0], "/dev/shm/" + env.segment_name,
                         str(seconds), str(h["num_envs"]), *rows], stdout=subprocess.PIPE,
                        text=True)
assert proc.stdout.readline().strip() == "flipping"
steps = errors = remade = 0
kinds = set()
end = time.monotonic() + seconds
fresh = True
while time.monotonic() < end:
    try:
        if fresh:
            obs, info = env.reset(seed=1)
            fresh = False
        else:
            obs, reward, term, trunc, info = env.recv(timeout=2.0)
        steps += len(info["env_id"])
        env.send(np.zeros(len(info["env_id"]), np.int64), info["env_id"])
    except (ShmatariError, ValueError) as exc:  # ours, or collect's row check
        errors += 1
        kinds.add(type(exc).__name__)
        fresh = True
        if env._client._broken or isinstance(exc, (shmatari.PoolClosedError,
                                                   shmatari.WorkerError)):
            env.close()
            env = shmatari.make("Pong", num_envs=8, batch_size=4, seed=1)
            remade += 1
out, _ = proc.communicate(timeout=60)
env.close()
import os
left = [n for n in os.listdir("/dev/shm") if n.startswith(f"shmatari_{os.getpid()}_")]
assert not left, left
print("steps", steps, "errors", errors, "remade", remade, "kinds", sorted(kinds), out.strip())
"""


def test_concurrent_writer_gives_the_python_client_clean_errors(tmp_path):
    """Issue 25, the Python client: another process flips the env_id rows of
    the ring while the pool steps (recv, then send to info["env_id"]): each
    refusal is an exception of shmatari's (or a ValueError naming the row),
    after which reset() goes on; no crash, nothing left in /dev/shm."""
    res = subprocess.run([sys.executable, "-c", _PY_CLIENT, str(FUZZ_SECONDS), _PY_FLIPPER],
                         capture_output=True, text=True, timeout=FUZZ_SECONDS + 240,
                         cwd=tmp_path)
    print(res.stdout.strip())
    assert res.returncode == 0, res.stdout + res.stderr[-4000:]
    m = re.search(r"steps (\d+) errors (\d+) .* flips (\d+)", res.stdout)
    assert m and int(m[3]) > 0, res.stdout
    assert int(m[1]) > 0 or int(m[2]) > 0, res.stdout


# -- a same-user shrink of a live segment ------------------------------------------------

def test_server_survives_a_shrunk_segment_and_removes_it(tmp_path):
    """Another process of the same user truncates a live pool's segment: the
    workers may die of SIGBUS, but the server restores the size, stops them
    and removes the segment (exit status 1), instead of dying and leaving it."""
    from test_server import Server

    s = Server(tmp_path, num_envs=2, num_workers=1)
    try:
        fd = os.open(f"/dev/shm/{s.segment}", os.O_RDWR | os.O_NOFOLLOW)
        try:
            os.ftruncate(fd, 512)  # not even the header is left
        finally:
            os.close(fd)
        assert s.proc.wait(30) == 1
        assert "was shrunk to 512 bytes" in s.stderr()
        assert "Traceback" not in s.stderr()
        s.assert_gone()
    finally:
        s.stop(signal.SIGKILL)


# -- a same-user process that rewrites a row between two reads, or keeps a waiter awake --

def test_a_failed_state_written_into_a_live_workers_record_does_not_wrap_the_count():
    """A FAILED state that another process wrote into a live worker's record,
    with ``failed_workers`` left at 0: the pool replaces the worker (it
    counts as dead) and took one from the count, which wrapped to
    2**32 - 1, so the replacement was never seen ready and the pool broke
    after ``start_timeout`` (an attacker's pass). The count now stops at 0
    and the pool goes on."""
    with shmatari.make("null", num_envs=2, num_workers=1, seed=0, restart_workers=True,
                       start_timeout=10) as env:
        env.reset()
        layout = _core.struct_layout()["shmatari_worker_ctrl"]
        header = env._client._seg.header()
        pid = env.worker_pids[0]
        os.kill(pid, signal.SIGSTOP)  # so that the next step waits, and checks the pool
        resume = threading.Timer(1.0, os.kill, (pid, signal.SIGCONT))
        other = shm.attach(env.segment_name)  # as any process of this user may
        try:
            state = np.ndarray((1,), np.uint32, other.buf,
                               header["worker_ctrl_offset"] + layout["state"])
            state[0] = _core.WORKER_FAILED
            del state
            resume.start()
            for _ in range(3):
                env.step(np.zeros(2, np.int64), timeout=30)
        finally:
            resume.join()
            other.close()
        assert env.worker_pids[0] != pid  # replaced, as a failed worker is
        ready, failed = env._client._seg.counts()
        assert failed == 0, failed


def test_an_exited_state_written_into_a_live_workers_record_is_named_not_blamed_on_a_kill():
    """EXITED written into a live worker's record: the pool counts the
    worker dead, waits a second for its process to end, kills it, and
    reported that kill as the cause, "died: killed by signal 9 (SIGKILL)"
    (an attacker's pass). The error now says what the pool saw and did."""
    from shmatari.errors import WorkerError

    with shmatari.make("null", num_envs=2, num_workers=1, seed=0, start_timeout=10) as env:
        env.reset()
        layout = _core.struct_layout()["shmatari_worker_ctrl"]
        header = env._client._seg.header()
        pid = env.worker_pids[0]
        os.kill(pid, signal.SIGSTOP)  # so that the next step waits, and checks the pool
        other = shm.attach(env.segment_name)  # as any process of this user may
        try:
            state = np.ndarray((1,), np.uint32, other.buf,
                               header["worker_ctrl_offset"] + layout["state"])
            state[0] = _core.WORKER_EXITED
            del state
            with pytest.raises(WorkerError) as err:
                env.step(np.zeros(2, np.int64), timeout=30)
        finally:
            other.close()
            if _core.pid_alive(pid):
                os.kill(pid, signal.SIGCONT)
    text = str(err.value)
    assert f"worker 0 (pid {pid}, envs 0..1) died: its state word read EXITED while its " \
           f"process ran on" in text, text
    assert "so the pool killed it (SIGKILL)" in text and "killed by signal" not in text, text


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_batch_no_worker_will_fill_ends_a_wait_without_a_timeout(mode):
    """One write by another process of this user to where results go (the
    header's ``alloc_pos``, asynchronous; an env's ``results`` count,
    synchronous) puts a row in the next batch's slot, and the batch waited
    for never fills. With a timeout the wait ended in StepTimeoutError ("no
    env has a command in flight"), without one it never ended (an attacker's
    pass, left documented on 2026-12-05). Once every env in flight has
    answered and the batch is still short, the wait now ends within a
    slice: PoolClosedError naming the batch and the words, whatever the
    timeout, and the pool closes cleanly."""
    from shmatari.errors import PoolClosedError

    def alarm(signum, frame):
        raise AssertionError("the wait did not end within 30 s")

    batch_size = 2 if mode == "async" else 4
    with shmatari.make("null", num_envs=4, num_workers=2, batch_size=batch_size,
                       seed=0) as env:
        seg = env._client._seg
        header = seg.header()
        if mode == "async":
            env.async_reset()
            env.recv(timeout=30)
            env.recv(timeout=30)  # every env idle: nothing in flight
            offset = _core.struct_layout()["shmatari_header"]["alloc_pos"]
        else:
            env.reset(timeout=30)
            layout = _core.struct_layout()["shmatari_env_ctrl"]
            offset = header["env_ctrl_offset"] + layout["results"]
        other = shm.attach(env.segment_name)  # as any process of this user may
        try:
            counter = np.ndarray((1,), np.uint64, other.buf, offset)
            counter[0] += 1
            del counter
        finally:
            other.close()
        previous = signal.signal(signal.SIGALRM, alarm)
        signal.alarm(30)
        try:
            with pytest.raises(PoolClosedError, match=r"cannot go on: batch \d+ holds \d of its "
                                                      rf"{batch_size} results, and every env "
                                                      r"with a command in flight \(4\) has "
                                                      r"answered.*alloc_pos, an env's results"):
                if mode == "async":
                    env.send(np.zeros(2, np.int64), np.array([0, 1]))
                    env.send(np.zeros(2, np.int64), np.array([2, 3]))
                    env.recv(timeout=None)
                else:
                    env.step(np.zeros(4, np.int64), timeout=None)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        with pytest.raises(PoolClosedError):
            env.step(np.zeros(batch_size, np.int64), timeout=5)


@pytest.mark.parametrize("start_method", ["zygote", "forkserver"])
def test_a_replacement_worker_refuses_a_group_another_process_wrote(start_method):
    """A worker's envs (``env_begin``, ``env_end``) are also segment words,
    which a client reads to know whom to wake. A worker that replaced a dead
    one built and served the envs those words named: rewritten to another
    worker's envs (of the same count), it served those and left its own
    unanswered, and the step waited until its timeout, for good without one,
    blaming a stuck emulator (an attacker's pass). A worker now gets its
    group from its pool's own record and fails, naming the words, where
    they differ."""
    from shmatari.errors import WorkerError

    with shmatari.make("null", num_envs=4, num_workers=2, seed=0, restart_workers=True,
                       start_method=start_method) as env:
        env.reset()
        layout = _core.struct_layout()["shmatari_worker_ctrl"]
        record = env._client._seg.header()["worker_ctrl_offset"] + layout["sizeof"]
        other = shm.attach(env.segment_name)  # as any process of this user may
        try:
            words = np.ndarray((2,), np.uint32, other.buf, record + layout["env_begin"])
            assert words.tolist() == [2, 4]
            words[:] = [0, 2]  # worker 0's envs
            del words
        finally:
            other.close()
        os.kill(env.worker_pids[1], signal.SIGKILL)
        with pytest.raises(WorkerError, match=r"env_begin, env_end words say envs \[0, 2\), "
                                              r"not its group \[2, 4\)"):
            env.step(np.zeros(4, np.int64), timeout=20)


@pytest.mark.parametrize("word", [0xFFFFFFFF, 0])
def test_a_restart_counts_ready_workers_from_its_own_record(no_leaks, word):
    """The restart took the count of ready workers from the segment's
    ready_workers word and waited for that plus the replacements: rewritten
    to 2**32 - 1 by another process, the sum overflowed and step() raised a
    bare OverflowError (an attacker's pass, 2026-12-06). The count now comes
    from the pool's own record, and each replacement's own READY state
    ends the wait too: the step is answered, the lost game flagged,
    whatever the word says (0 included, which the count would never
    reach)."""
    with shmatari.make("null", num_envs=4, num_workers=2, seed=0, restart_workers=True,
                       start_timeout=20) as env:
        env.reset()
        at = _core.MEMBERS["shmatari_header"]["ready_workers"][0]
        other = shm.attach(env.segment_name)  # as any process of this user may
        try:
            ready = np.ndarray((1,), np.uint32, other.buf, at)
            assert ready[0] == 2
            ready[0] = word
            del ready
        finally:
            other.close()
        os.kill(env.worker_pids[1], signal.SIGKILL)
        _, _, _, truncated, info = env.step(np.zeros(4, np.int64), timeout=20)
        assert truncated.tolist() == [False, False, True, True]
        assert info["worker_restarted"].tolist() == [False, False, True, True]
        env.step(np.zeros(4, np.int64), timeout=20)


class _ScribblingSegment:
    """A client's Segment that, right after each batch is taken (the C
    state machine has read its rows), writes ``env_id`` of row 0 of that
    slot to another env, as a same-user process may at any moment."""

    def __init__(self, seg, buf):
        self._seg, self._buf = seg, buf
        h = seg.header()
        self._env_id = h["slot_field_offset"][[f for f, _ in _core.FIELDS].index("env_id")]
        self.num_envs = h["num_envs"]

    def __getattr__(self, name):
        return getattr(self._seg, name)

    def client_next_batch(self, timeout, stall=-1.0):
        code = self._seg.client_next_batch(timeout, stall)
        if code == _core.OK:
            row0 = np.ndarray((1,), np.int32, self._buf,
                              self._seg.slot_offset(self._seg.taken) + self._env_id)
            row0[0] = (row0[0] + 1) % self.num_envs
        return code


@pytest.mark.usefixtures("no_leaks")
def test_a_row_rewritten_after_the_batch_is_taken_changes_nothing_handed_out():
    """The batch's rows are read once: the client's state machine and the
    arrays it hands out (``info["env_id"]``, rewards, terminated, ...) come
    from one private copy, taken when the batch is. Before, the state
    machine read each row's ``env_id`` in the segment and ``recv()`` copied
    it again: a same-user process that changed it in between had the caller
    shown envs [0, 1] while the machine recorded [1, 1], and the next step of
    every env was refused (an attacker's pass, reproduced with a writer
    toggling the word; here the write lands between the two reads)."""
    with shmatari.make("null", num_envs=2, num_workers=1, seed=0) as env:
        env.reset()
        client = env._client
        client._seg = _ScribblingSegment(client._seg, client._res.segment.buf)
        try:
            for _ in range(20):
                obs, reward, terminated, truncated, info = env.step(np.zeros(2, np.int64))
                assert info["env_id"].tolist() == [0, 1]
        finally:
            client._seg = client._seg._seg


def test_wait_ready_ends_at_its_timeout_while_another_process_keeps_waking_it():
    """``Segment.wait_ready`` (make()'s and restart_workers()'s wait for the
    workers, between liveness checks) looped on every change of main_seq
    with the whole timeout each time: a same-user process bumping it every
    few ms kept make() past ``start_timeout`` with a dead worker, for as long
    as it went on (an attacker's pass). Its timeout is one deadline now."""
    import threading
    import time

    from test_liveness import _segment

    buf, seg = _segment()  # one worker, in private memory
    stop = threading.Event()

    def bump():  # mark_worker bumps main_seq and wakes its sleepers
        end = time.monotonic() + 3.0
        while not stop.is_set() and time.monotonic() < end:
            _core.mark_worker(seg, 0, _core.WORKER_STARTING, pid=os.getpid())
            time.sleep(0.003)

    bumper = threading.Thread(target=bump)
    bumper.start()
    try:
        t0 = time.monotonic()
        ready = seg.wait_ready(1, 0.3)
        waited = time.monotonic() - t0
    finally:
        stop.set()
        bumper.join()
    assert not ready
    assert 0.25 < waited < 2.0, waited  # the bumps went on for 3 s


@pytest.mark.skipif(not LINUX, reason="/proc, futexes")
@pytest.mark.usefixtures("no_leaks")
def test_an_orphaned_worker_ends_while_another_process_keeps_waking_it(tmp_path):
    """An idle worker checked that its owner lives only after a quiet 0.2 s
    sleep: a same-user process waking it every 10 ms (tests/c/wait_bumped.c,
    worker 0's wake_seq) kept a forkserver worker, which has no parent-death
    signal, and the segment it holds alive after its trainer was killed, for
    as long as it went on (an attacker's pass). It checks every poll now,
    woken or not."""
    import time

    exe = _build(tmp_path, "wait_bumped.c", "wait_bumped")
    trainer = subprocess.Popen([sys.executable, "-c", """
import time, shmatari
env = shmatari.make("null", num_envs=1, num_workers=1, seed=0, start_method="forkserver")
env.reset()
print(env.segment_name, env.worker_pids[0], flush=True)
time.sleep(120)
"""], stdout=subprocess.PIPE, text=True)
    bumper = None
    try:
        segment, worker = trainer.stdout.readline().split()
        worker = int(worker)
        bumper = subprocess.Popen([str(exe), "bump", segment[len("shmatari_"):], "10", "30",
                                   "wake0"], stdout=subprocess.PIPE, text=True)
        assert bumper.stdout.readline() == "bumping\n"
        time.sleep(0.3)
        trainer.kill()
        trainer.wait(10)
        t0 = time.monotonic()
        while os.path.exists(f"/proc/{worker}") and time.monotonic() - t0 < 10:
            with open(f"/proc/{worker}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.05)
        gone = time.monotonic() - t0
        assert bumper.poll() is None  # still bumping
        assert gone < 3.0, f"the orphaned worker lived {gone:.1f} s while woken"
        t0 = time.monotonic()
        while os.path.exists(f"/dev/shm/{segment}") and time.monotonic() - t0 < 5:
            time.sleep(0.05)
        assert not os.path.exists(f"/dev/shm/{segment}")
    finally:
        for p in (bumper, trainer):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.skipif(not LINUX or os.geteuid() != 0, reason="mounts a tmpfs: root on Linux")
def test_the_stale_segment_sweep_leaves_a_sparse_file_alone(tmp_path):
    """Every make() sweeps /dev/shm for stale pools, and mapped a named
    pool's file (``shmatari_<name>``) to read its header without the hole
    check that every attach makes: a same-user sparse file killed the
    trainer with SIGBUS once the tmpfs was full (an attacker's pass). The
    sweep checks it as attach does and leaves it. Shown on a private 64 KiB
    tmpfs, so that /dev/shm itself is never filled."""
    d = tmp_path / "shm"
    d.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=1777", "tmpfs", str(d)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        fd = os.open(d / "shmatari_squat", os.O_CREAT | os.O_RDWR | os.O_EXCL, 0o600)
        os.ftruncate(fd, 8192)  # a hole: no page allocated
        os.close(fd)
        fd = os.open(d / "filler", os.O_CREAT | os.O_WRONLY, 0o600)
        try:
            while True:
                os.write(fd, b"x" * 4096)
        except OSError:
            pass  # full
        finally:
            os.close(fd)
        res = subprocess.run([sys.executable, "-c",
                              f"from shmatari import shm; print(shm.sweep_stale({str(d)!r}))"],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, (res.returncode, res.stderr[-2000:])
        assert res.stdout.strip() == "[]"
        assert (d / "shmatari_squat").exists()
    finally:
        subprocess.run(["umount", str(d)], check=True)


@pytest.mark.skipif(not LINUX, reason="/proc, futexes")
@pytest.mark.parametrize("start_method", ["forkserver", "zygote"])
def test_orphaned_workers_end_whatever_the_header_says_of_their_owner(start_method):
    """A worker judged its owner by the header's owner_pid and owner_start: a
    same-user process that wrote 0 over owner_start, then 1 (init, always
    alive) over owner_pid, kept the workers of a killed trainer running under
    the fork server for good, holding the segment (an attacker's pass; under
    zygote they ended as "terminated" and left the segment). A worker keeps
    the pid and start time its owner gave it: they end, and the segment goes,
    as without the rewrite."""
    import mmap
    import struct
    import time

    trainer = subprocess.Popen([sys.executable, "-c", f"""
import time, shmatari
env = shmatari.make("null", num_envs=2, num_workers=2, seed=0, start_method={start_method!r})
env.reset()
print(env.segment_name, *env.worker_pids, flush=True)
time.sleep(120)
"""], stdout=subprocess.PIPE, text=True)
    workers = []
    try:
        segment, *pids = trainer.stdout.readline().split()
        workers = [int(p) for p in pids]
        offsets = _core.struct_layout()["shmatari_header"]
        fd = os.open(f"/dev/shm/{segment}", os.O_RDWR)
        try:
            with mmap.mmap(fd, 0) as m:
                struct.pack_into("<Q", m, offsets["owner_start"], 0)  # "unknown"
                struct.pack_into("<i", m, offsets["owner_pid"], 1)    # init lives
        finally:
            os.close(fd)
        time.sleep(0.3)
        trainer.kill()
        trainer.wait(10)
        t0 = time.monotonic()
        while any(map(pid_alive, workers)) and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        left = [w for w in workers if pid_alive(w)]
        assert not left, f"workers {left} outlived their trainer by {time.monotonic() - t0:.1f} s"
        t0 = time.monotonic()
        while os.path.exists(f"/dev/shm/{segment}") and time.monotonic() - t0 < 5:
            time.sleep(0.05)
        assert not os.path.exists(f"/dev/shm/{segment}")
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()
        for w in workers:
            if pid_alive(w):
                os.kill(w, signal.SIGKILL)


_LATE_WORKER = """
import pickle, sys
from shmatari.worker import worker_main
kwargs = pickle.load(open(sys.argv[1], "rb"))
worker_main(**kwargs)
"""


@pytest.mark.skipif(not LINUX, reason="/dev/shm files, inodes")
def test_a_late_worker_of_a_dead_pool_leaves_the_next_pool_of_its_name_alone(tmp_path):
    """A worker that attached only after its owner died (stopped before it
    attached, say) found under the pool's name the segment of a new pool of
    that name: it wrote its pid and state into the new pool's record, judged
    itself orphaned and removed the new pool's segment (an attacker's pass,
    against ``shmatari serve --name``). A worker now knows its own pool's
    file (``segment_id``), and leaves another one as it is."""
    import dataclasses
    import pickle

    from shmatari._vector_env import ShmVectorEnv

    name = f"{shm.PREFIX}late{os.getpid()}"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with shmatari.make("null", num_envs=2, num_workers=1, seed=0) as env:
        config = env.config
    old = ShmVectorEnv(config, segment_name=name)
    try:
        kwargs = dict(shm_name=name, worker=0,
                      config_fields=dataclasses.asdict(old.config), owner_pid=dead.pid,
                      owner_start=0, spin=old._supervisor.worker_spin,
                      segment_id=shm.identity(old._supervisor.res.segment))
    finally:
        old.close()
    new = ShmVectorEnv(config, segment_name=name)
    try:
        before = shm.identity(new._supervisor.res.segment)
        pids = list(new.worker_pids)
        args = tmp_path / "kwargs.pickle"
        args.write_bytes(pickle.dumps(kwargs))
        late = subprocess.run([sys.executable, "-c", _LATE_WORKER, str(args)],
                              capture_output=True, text=True, timeout=60)
        assert late.returncode == 0, late.stderr
        st = os.stat(f"{shm.SHM_DIR}/{name}")
        assert (st.st_dev, st.st_ino) == before, "the new pool's segment was removed"
        new.reset(seed=0)
        obs, *_ = new.step(np.zeros(2, np.int64))
        assert obs.shape[0] == 2 and list(new.worker_pids) == pids
        assert new._supervisor.res.segment is not None
    finally:
        new.close()
    assert not os.path.exists(f"{shm.SHM_DIR}/{name}")


@pytest.mark.parametrize("batch_size,rewrite,batch_order", [
    (4, "twice", "first_ready"), (2, "twice", "first_ready"), (4, "outside", "first_ready"),
    (4, "swap", "first_ready"), (2, "swap", "fixed")])
def test_a_batch_whose_env_ids_another_process_rewrote_is_not_handed_out(no_leaks, batch_size,
                                                                          rewrite, batch_order):
    """One row's env_id rewritten after the workers published and before
    recv(): to another row's env (a batch naming env 0 twice and env 1
    never), or outside the pool. The C client recorded the rows it could and
    skipped the rest, and recv() handed out env_id [0, 0, 2, 3] with no
    error, the pool then blaming the caller ("env 1 is still running"; an
    attacker's pass, 2026-12-05). Now the wait fails: PoolClosedError naming
    the row, the pool broken, closed cleanly. In an ordered pool (sync, or
    batch_order "fixed") each row's env is known: two rows' ids swapped went
    to the trainer with no error until 2026-12-06 (an attacker's pass)."""
    import mmap
    import time

    env = shmatari.make("null", num_envs=4, num_workers=2, batch_size=batch_size, seed=0,
                        batch_order=batch_order)
    try:
        env.reset() if batch_size == 4 else (env.async_reset(), env.recv())
        seg = env._client._seg
        h = seg.header()
        slot = seg.slot_offset(seg.taken % h["ring_depth"])
        done_at = slot + _core.MEMBERS["shmatari_slot_header"]["done_count"][0]
        ids_at = slot + h["slot_field_offset"][0]
        with open(f"/dev/shm/{env.segment_name}", "r+b") as f, \
                mmap.mmap(f.fileno(), 0) as mm:  # another process's mapping
            if batch_size == 4:
                env.send(np.zeros(4, np.int64))
            else:
                env.send(np.zeros(2, np.int64), env._client._last_ids)
            deadline = time.monotonic() + 10
            while np.frombuffer(mm, np.uint32, 1, done_at)[0] < batch_size:
                assert time.monotonic() < deadline, "the workers did not publish"
                time.sleep(0.001)
            ids = np.frombuffer(mm, np.int32, batch_size, ids_at).copy()
            if rewrite == "swap":
                bad, row = ids[1], 0
                mm[ids_at:ids_at + 8] = ids[[1, 0]].tobytes()
            else:
                bad, row = np.int32(ids[0] if rewrite == "twice" else 999), 1
                mm[ids_at + 4:ids_at + 8] = bad.tobytes()
            with pytest.raises(shmatari.PoolClosedError,
                               match=rf"row {row} names env {int(bad)}, .*no worker wrote it"):
                env.recv(timeout=5)
        with pytest.raises(shmatari.PoolClosedError, match="broken"):
            env.step(np.zeros(4, np.int64) if batch_size == 4 else np.zeros(2, np.int64))
    finally:
        env.close()


@pytest.mark.parametrize("posted, rewritten, autoreset, why", [
    ("step", "observe", "next_step", "whose command was a step, but the row is an observation"),
    ("reset", "step", "next_step", "whose command was a reset, but the row is not a reset's "
                                   "result"),
    ("observe", "step", "disabled", "whose command was an observation"),
    ("step", "reset", "next_step", "whose command was a step, but the row is a reset that its "
                                   "autoreset does not make there"),
    ("step", "reset", "same_step", "whose command was a step, but the row is a reset"),
    ("step", "reset", "disabled", "whose command was a step, but the row is a reset")])
def test_a_command_word_another_process_rewrote_is_not_answered_as_the_posted_one(
        no_leaks, posted, rewritten, autoreset, why):
    """Env 0's command word rewritten between the client's post and the
    worker's read (here with the worker stopped): a STEP turned into an
    OBSERVE was answered with an observation and the step was lost with no
    error (frame numbers stood still: an attacker's pass, 2026-12-06). The
    client now checks each row's flags against the command it posted (a
    step's result is no observation, a reset's is a reset, an observation's
    is one): the wait fails, PoolClosedError naming the row, the pool
    broken. A STEP turned into a RESET passed that check, a step's row
    being a reset where the autoreset makes one (a review, 2026-12-06): a
    step's reset row is accepted only from the autoreset, the done step's
    final record in a same-step pool, after a row that ended the episode
    in a next-step pool, never in a disabled one."""
    import mmap

    env = shmatari.make("null", num_envs=2, num_workers=1, seed=0, autoreset_mode=autoreset)
    try:
        env.reset()
        ctrl = _core.struct_layout()["shmatari_env_ctrl"]
        at = env._client._seg.header()["env_ctrl_offset"] + ctrl["cmd"]  # env 0's
        code = {"step": _core.CMD_STEP, "observe": _core.CMD_OBSERVE,
                "reset": _core.CMD_RESET}[rewritten]
        worker = env.worker_pids[0]
        os.kill(worker, signal.SIGSTOP)
        try:
            if posted == "step":
                env.send(np.zeros(2, np.int64))
            elif posted == "reset":
                env.async_reset()
            else:  # env 1 reset, env 0 observed
                env.async_reset(options={"reset_mask": np.array([False, True])})
            with open(f"/dev/shm/{env.segment_name}", "r+b") as f, \
                    mmap.mmap(f.fileno(), 0) as mm:  # another process's mapping
                mm[at:at + 4] = np.uint32(code).tobytes()
        finally:
            os.kill(worker, signal.SIGCONT)
        with pytest.raises(shmatari.PoolClosedError,
                           match=rf"row 0, env 0's, {why}.*another command than this "
                                 rf"client posted"):
            env.recv(timeout=10)
        with pytest.raises(shmatari.PoolClosedError, match="broken"):
            env.step(np.zeros(2, np.int64))
    finally:
        env.close()


def test_a_rewritten_alloc_pos_during_a_restart_breaks_the_pool_with_a_worker_error(no_leaks):
    """alloc_pos moved on by another process while a worker's command was in
    flight, then the worker killed: the restart's recovery found a reserved
    row no dead env explains and raised a bare RuntimeError from recv(), at
    every call, the pool neither broken nor its worker replaced (one call
    even returned a batch: an attacker's pass, 2026-12-06). Now the restart
    raises WorkerError, naming the word, and the pool is broken."""
    import mmap
    import time

    env = shmatari.make("null", num_envs=4, num_workers=4, batch_size=2, seed=0,
                        restart_workers=True)
    try:
        env.async_reset()
        env.recv()
        ids = env.recv()[4]["env_id"]  # every env's reset received: none in flight
        pid = env.worker_pids[int(ids[0])]  # one env per worker
        os.kill(pid, signal.SIGSTOP)
        env.send(np.zeros(2, np.int64), ids)
        time.sleep(0.2)  # the other worker answers
        at = _core.struct_layout()["shmatari_header"]["alloc_pos"]
        with open(f"/dev/shm/{env.segment_name}", "r+b") as f, \
                mmap.mmap(f.fileno(), 0) as mm:  # another process's mapping
            pos = int(np.frombuffer(mm, np.uint64, 1, at)[0])
            mm[at:at + 8] = np.uint64(pos + 2).tobytes()
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(shmatari.WorkerError, match=r"while restarting worker\(s\) "
                           r"\[\d\]: result position \d+ was reserved but never written.*"
                           r"rewrote the ring's words, such as alloc_pos"):
            env.recv(timeout=10)
        for _ in range(2):
            with pytest.raises(shmatari.PoolClosedError, match="broken"):
                env.recv(timeout=10)
    finally:
        env.close()


_REWRITTEN_ACTION_SET = """
import os, sys, time
import shmatari
from shmatari import _core
orig = _core.set_num_actions
# The segment's action set differs from worker 0's own, as after another
# process's write between the worker's and the owner's (workers forked
# from this process carry the change).
_core.set_num_actions = lambda seg, ids: orig(seg, list(reversed(ids)))
try:
    shmatari.make("Breakout", 2, num_workers=1, start_method="fork")
    print("made")
except ValueError as exc:
    print("ValueError:", exc)
time.sleep(0.5)
# this process's segments only (automatic names hold the owner's pid): other
# tests' pools come and go in /dev/shm meanwhile
print("left:", sorted(n for n in os.listdir("/dev/shm")
                      if n.startswith(f"shmatari_{os.getpid()}_")))
"""


def test_an_action_set_rewritten_while_the_pool_starts_is_refused():
    """Worker 0 writes the action set before the pool runs and the owner
    read it once from the segment, with nothing private to compare: a write
    in that window changed the trainer's action space (Discrete(18), or the
    set reordered: wrong get_action_meanings(); an attacker's pass,
    2026-12-06). Worker 0 now also sends its set through its own pipe, and
    make() refuses a segment whose set differs, leaving nothing behind."""
    proc = subprocess.run([sys.executable, "-c", _REWRITTEN_ACTION_SET], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert ("ValueError: the segment's action set [4, 3, 1, 0] is not the one worker 0 built "
            "([0, 1, 3, 4]): another process rewrote it while the pool started"
            in proc.stdout), proc.stdout + proc.stderr
    assert "left: []" in proc.stdout, proc.stdout


@pytest.mark.parametrize("start_method", ["zygote", "spawn"])
def test_a_workers_fault_channel_cannot_be_opened_again_through_proc(no_leaks, start_method):
    """The start-up lines (worker 0's action set, each worker's ready line)
    came through a pipe, whose end any process of the same user could open
    again through /proc/<owner>/fd/<n>: a forged action-set line written
    there before worker 0's own, with the segment's set rewritten to match,
    made make() give the trainer actions in the wrong order (an attacker's
    pass, 2026-12-06). The channel is now a socket pair, which /proc does
    not open."""
    import errno

    env = shmatari.make("null", num_envs=2, num_workers=2, seed=0, start_method=start_method)
    try:
        fds = [pipe.fileno() for pipe in env._res.fault_pipes]
        assert len(fds) == 2
        for fd in fds:
            with pytest.raises(OSError) as err:
                os.close(os.open(f"/proc/{os.getpid()}/fd/{fd}", os.O_WRONLY))
            assert err.value.errno == errno.ENXIO
        env.reset()
        env.step(np.zeros(2, np.int64))
    finally:
        env.close()


@pytest.mark.parametrize("lines,why", [
    ({0: [b"shmatari-action-set 0,1,4,3", b"shmatari-action-set 0,1,3,4"]}, "2 line(s)"),
    ({0: [b"shmatari-action-set 0,1,x"]}, "1 line(s)"),
    ({0: []}, "0 line(s)"),
    ({0: [b"shmatari-action-set 0,1,3,4"], 1: [b"shmatari-action-set 0,1"]}, "worker 1's"),
])
def test_start_up_lines_other_than_the_workers_own_are_refused(lines, why):
    """The first action-set line was taken and a line that did not parse
    skipped the comparison with the segment's set; any lines but worker 0's
    one action-set line now refuse the pool."""
    from shmatari.supervisor import _action_set_of

    assert _action_set_of({0: [b"shmatari-action-set 0,1,3,4"]}, 2) == [0, 1, 3, 4]
    with pytest.raises(shmatari.WorkerError, match="another process wrote into it") as err:
        _action_set_of(lines, 2)
    assert why in str(err.value)


#: (write, who names it): the client, at its next post (a word it finds
#: moved), or the worker, as it notices the word (a value no client posts).
REQ_SEQ_WRITES = [("raised by one and served", "client"), ("raised by one, not yet served",
                                                              "client"),
                  ("raised by two", "worker"), ("lowered", "worker"),
                  ("raised by one, served, put back", "worker"),
                  ("raised by two, the worker's state written STARTING", "worker")]


@pytest.mark.parametrize("write,named_by", REQ_SEQ_WRITES)
def test_a_req_seq_another_process_moved_is_named(no_leaks, write, named_by):
    """The client posted ``req_seq + 1`` read back from the segment, and the
    worker ran any value that was not the last it answered: another process
    that added 1 to an idle env's req_seq (and woke its worker) made the
    worker run a command nobody posted, and from then on every result of
    that env came one command late, with no error (an attacker's pass,
    2026-12-06: 90 steps of env 0 off the unattacked run's; a second pass
    did it with +2 while the worker's state word read STARTING, which the
    client's check leaves to the liveness check, and with +1 put back after
    the worker ran it). The client now posts its own count and refuses a
    word that is not it; the worker runs only the next command of its own
    count and fails on any other value, naming the word."""
    import mmap
    import time

    env = shmatari.make("null", num_envs=4, num_workers=2, seed=0)
    try:
        env.reset()
        for _ in range(3):
            env.step(np.zeros(4, np.int64))
        layout = _core.struct_layout()
        at = _core.MEMBERS["shmatari_header"]
        with open(f"/dev/shm/{env.segment_name}", "r+b") as f, \
                mmap.mmap(f.fileno(), 0) as mm:  # another process's mapping
            word = lambda name: np.frombuffer(mm, np.uint64, 1, at[name][0])  # noqa: E731
            env0 = int(word("env_ctrl_offset")[0])
            worker0 = int(word("worker_ctrl_offset")[0])
            ctrl = layout["shmatari_env_ctrl"]
            req = np.frombuffer(mm, np.uint32, 1, env0 + ctrl["req_seq"])
            ack = np.frombuffer(mm, np.uint32, 1, env0 + ctrl["ack_seq"])
            wake = np.frombuffer(mm, np.uint32, 1,
                                 worker0 + layout["shmatari_worker_ctrl"]["wake_seq"])
            state = np.frombuffer(mm, np.uint32, 1,
                                  worker0 + layout["shmatari_worker_ctrl"]["state"])
            mine = int(req[0])
            assert int(ack[0]) == mine

            def looked_at() -> None:  # wakes worker 0, and waits until it ran or failed
                wake[0] += 1
                deadline = time.monotonic() + 10
                before = int(ack[0])
                while int(ack[0]) == before and int(state[0]) != _core.WORKER_FAILED and \
                        time.monotonic() < deadline:
                    time.sleep(0.01)

            if "STARTING" in write:
                state[0] = _core.WORKER_STARTING
            req[0] = {"raised by one": mine + 1, "raised by two": mine + 2,
                      "lowered": mine - 1}[write.split(",")[0].split(" and")[0]]
            if "not yet" not in write:
                looked_at()
            if "put back" in write:
                assert int(ack[0]) == mine + 1  # it ran the command nobody posted
                req[0] = mine
                looked_at()
            del req, ack, wake, state, word
        if named_by == "client":
            with pytest.raises(shmatari.PoolClosedError,
                               match=rf"env 0's req_seq reads \d+, but this client's last "
                                     rf"command to it was number {mine}: another process "
                                     rf"wrote the env's command words"):
                env.step(np.zeros(4, np.int64))
        else:
            with pytest.raises(shmatari.WorkerError,
                               match=r"env 0's req_seq reads \d+, but the last command worker "
                                     r"0 answered for it was number \d+: a client posts one "
                                     r"command at a time") as info:
                for _ in range(3):  # the worker fails as it notices the word
                    env.step(np.zeros(4, np.int64))
            # the cause on the error text's first line, before the traceback
            # (a C client's message keeps its first 512 bytes: an attacker's pass)
            first = info.value.worker_traceback.split("\n", 1)[0]
            assert re.search(r"^worker 0 \(pid \d+\) failed: ValueError: env 0's req_seq "
                             r"reads \d+", first), str(info.value)
        with pytest.raises(shmatari.PoolClosedError, match="broken"):
            env.step(np.zeros(4, np.int64))
    finally:
        env.close()


@pytest.mark.parametrize("state_written", [False, True], ids=["as_is", "state_starting"])
@pytest.mark.parametrize("batch_size", [2, 4], ids=["first_ready", "synchronous"])
def test_a_req_seq_put_back_before_its_worker_saw_it_is_named(no_leaks, batch_size,
                                                              state_written):
    """A req_seq put back to ack_seq before the worker noticed the command
    left it unrun for good: the worker sees no new command, and in a
    first-ready pool the other envs kept filling batches, so the env was
    lost from training, with no error, until the next full reset (an
    attacker's pass, 2026-12-06: 4,000 steps with env 2 answering none); a
    synchronous pool named the wrong words ("where results go"). The waits
    now check the commands in flight against the client's count at each
    liveness check, and before a stall is named, whatever the worker's
    state word says (a second pass wrote it STARTING, which the first
    version of the check left out, and the env was lost again)."""
    import mmap
    import time

    env = shmatari.make("null", num_envs=4, num_workers=2, batch_size=batch_size, seed=0)
    try:
        worker0 = env.worker_pids[0]
        env.async_reset()
        ids = env.recv()[4]["env_id"]
        while 0 not in ids:  # env 0 idle: its result in hand
            env.send(np.zeros(len(ids), np.int64), ids)
            ids = env.recv()[4]["env_id"]
        layout = _core.struct_layout()
        at = _core.MEMBERS["shmatari_header"]
        with open(f"/dev/shm/{env.segment_name}", "r+b") as f, \
                mmap.mmap(f.fileno(), 0) as mm:  # another process's mapping
            env0 = int(np.frombuffer(mm, np.uint64, 1, at["env_ctrl_offset"][0])[0])
            ctrl = layout["shmatari_env_ctrl"]
            req = np.frombuffer(mm, np.uint32, 1, env0 + ctrl["req_seq"])
            ack = np.frombuffer(mm, np.uint32, 1, env0 + ctrl["ack_seq"])
            state = np.frombuffer(mm, np.uint32, 1, int(np.frombuffer(
                mm, np.uint64, 1, at["worker_ctrl_offset"][0])[0])
                + layout["shmatari_worker_ctrl"]["state"])
            os.kill(worker0, signal.SIGSTOP)
            try:
                env.send(np.zeros(len(ids), np.int64), ids)
                posted = int(req[0])
                assert posted == int(ack[0]) + 1
                if state_written:
                    state[0] = _core.WORKER_STARTING
                req[0] = posted - 1  # put back before worker 0 saw it
            finally:
                os.kill(worker0, signal.SIGCONT)
            del req, ack, state
        deadline = time.monotonic() + 5
        with pytest.raises(shmatari.PoolClosedError,
                           match=rf"env 0's req_seq reads {posted - 1} while this client "
                                 rf"waited for its result, but this client's last command to "
                                 rf"it was number {posted}: another process wrote the env's "
                                 rf"command words"):
            while time.monotonic() < deadline:  # the other envs go on meanwhile
                ids = env.recv(timeout=2)[4]["env_id"]
                assert 0 not in ids
                env.send(np.zeros(len(ids), np.int64), ids)
    finally:
        env.close()


def test_alloc_pos_moved_back_in_a_first_ready_pool_is_named(no_leaks):
    """alloc_pos moved back by one made the next answer go to a position
    whose row was written and not yet taken: that env's result was written
    over, it stayed "in flight" with its command answered, and the other
    envs kept filling batches, so it was lost from training with no error
    (an attacker's pass, 2026-12-06: 5 of 5 runs lost an env; moved back by
    4, all of a worker's envs). The client now looks for the row of every
    env whose worker answered, at each liveness check, and a worker whose
    slot was full already fails, naming alloc_pos."""
    import time

    env = shmatari.make("null", num_envs=8, num_workers=2, batch_size=4, seed=0)
    try:
        env.async_reset()
        other = shm.attach(env.segment_name)  # as any process of this user may
        try:
            alloc = np.ndarray((1,), np.uint64, other.buf,
                               _core.MEMBERS["shmatari_header"]["alloc_pos"][0])
            deadline = time.monotonic() + 10
            with pytest.raises((shmatari.PoolClosedError, shmatari.WorkerError),
                               match="alloc_pos") as err:
                moved = False
                while time.monotonic() < deadline:
                    ids = env.recv(timeout=5)[4]["env_id"]
                    if not moved:
                        # the other batch's rows are written, not taken yet
                        time.sleep(0.05)
                        alloc[0] = int(alloc[0]) - 1
                        moved = True
                    env.send(np.zeros(len(ids), np.int64), ids)
            assert moved, str(err.value)
            del alloc
        finally:
            other.close()
    finally:
        env.close()


def _env_words(env, e: int):
    """(mapping, req_seq, ack_seq) of env ``e``, as another process maps them."""
    import mmap

    layout = _core.struct_layout()
    at = _core.MEMBERS["shmatari_header"]
    with open(f"/dev/shm/{env.segment_name}", "r+b") as f:
        mm = mmap.mmap(f.fileno(), 0)
    env0 = int(np.frombuffer(mm, np.uint64, 1, at["env_ctrl_offset"][0])[0])
    ctrl = layout["shmatari_env_ctrl"]
    base = env0 + e * ctrl["sizeof"]
    return (mm, np.frombuffer(mm, np.uint32, 1, base + ctrl["req_seq"]),
            np.frombuffer(mm, np.uint32, 1, base + ctrl["ack_seq"]))


def test_an_ack_seq_written_before_a_restart_does_not_drop_the_command_in_flight(no_leaks):
    """Which of a dead worker's envs had a command in flight was read from
    the segment (req_seq != ack_seq): another process that set a dead
    worker's env's ack_seq to its req_seq before the owner noticed the
    death made the replacement skip the command, and the env answered
    nothing again (an attacker's pass, 2026-12-06: 107 rows of env 2 in 300
    steps, no error; a synchronous pool stalled). The owner's recovery now
    takes it from its client's own record, and the replacement answers."""
    env = shmatari.make("Breakout", num_envs=4, num_workers=2, seed=0, restart_workers=True)
    try:
        env.reset()
        worker1 = env.worker_pids[1]
        mm, req, ack = _env_words(env, 2)
        os.kill(worker1, signal.SIGSTOP)
        env.send(np.zeros(4, np.int64))
        ack[0] = int(req[0])  # "answered", while worker 1 never ran it
        os.kill(worker1, signal.SIGKILL)
        del req, ack
        mm.close()
        _, _, _, truncated, info = env.recv(timeout=120)
        assert info["env_id"].tolist() == [0, 1, 2, 3]
        assert info["worker_restarted"].tolist() == [False, False, True, True]
        assert truncated.tolist() == [False, False, True, True]
        for _ in range(5):  # and the pool goes on
            info = env.step(np.zeros(4, np.int64))[4]
            assert info["env_id"].tolist() == [0, 1, 2, 3]
    finally:
        env.close()


def test_an_ack_seq_written_after_the_recovery_fails_the_replacement(no_leaks, monkeypatch,
                                                                    caplog):
    """A replacement worker decided from the segment's req_seq and ack_seq
    (again, after the owner's recovery had) which command to answer first:
    an ack_seq set one lower once the owner had recovered the ring made the
    replacement run the env's last command again, and every later result of
    that env came one command late, with no error (an attacker's pass,
    2026-12-06: caught only by a masked reset 21 steps later); one set to
    req_seq made it skip the command in flight. It now starts from the
    owner's plan and fails on an ack_seq that is not what the recovery left,
    naming it; the next replacement, recovered again, answers in step."""
    from shmatari import supervisor

    env = shmatari.make("Breakout", num_envs=4, num_workers=2, seed=0, restart_workers=True)
    try:
        env.reset()
        env.step(np.zeros(4, np.int64))
        spawn, writes = supervisor.Supervisor.spawn, []

        def spawn_after_a_write(self, w, restart=0, positions=None, timeout=None):
            if restart and not writes:  # the recovery is done: another process writes now
                mm, req, ack = _env_words(env, 2)
                ack[0] = int(req[0])  # "answered": the command in flight skipped
                writes.append(int(ack[0]))
                del req, ack
                mm.close()
            return spawn(self, w, restart, positions, timeout)

        monkeypatch.setattr(supervisor.Supervisor, "spawn", spawn_after_a_write)
        os.kill(env.worker_pids[1], signal.SIGKILL)
        with caplog.at_level("WARNING", logger="shmatari"):
            info = env.step(np.zeros(4, np.int64))[4]
        assert writes
        assert (f"env 2's ack_seq reads {writes[0]}, but the owner's recovery left it at "
                f"{writes[0] - 1} before this replacement started: another process wrote it"
                in caplog.text), caplog.text
        assert info["worker_restarted"].tolist() == [False, False, True, True]
        for _ in range(3):
            env.step(np.zeros(4, np.int64))
        # a result one command late would answer this masked reset with a step's row
        mask = np.array([False, False, True, False])
        _, info = env.reset(options={"reset_mask": mask})
        assert info["reset"].tolist() == mask.tolist()
        env.step(np.zeros(4, np.int64))
    finally:
        env.close()


def _restarted_stream(write_seed: bool) -> list:
    """Env 1's observations over 20 steps after its worker is killed and
    replaced (restart_workers), with the segment's seed_words written by
    another process first or not."""
    import mmap

    env = shmatari.make("Breakout", num_envs=2, num_workers=2, seed=11, restart_workers=True,
                        repeat_action_probability=0.25)
    try:
        env.reset()
        env.reset(seed=12)  # the owner's record follows the reseed
        for _ in range(5):
            env.step(np.ones(2, np.int64))
        if write_seed:
            at = _core.MEMBERS["shmatari_header"]["seed_words"][0]
            with open(f"/dev/shm/{env.segment_name}", "r+b") as f, \
                    mmap.mmap(f.fileno(), 0) as mm:
                mm[at:at + 8] = np.uint64(999).tobytes()
        os.kill(env.worker_pids[1], signal.SIGKILL)
        out = []
        for k in range(20):
            obs, *_ = env.step(np.full(2, k % 4))
            out.append(obs[1].tobytes())
        return out
    finally:
        env.close()


def test_a_replacement_worker_seeds_from_the_owners_record_not_the_segment(no_leaks):
    """A replacement worker rebuilt its envs from the segment's seed_words,
    which another process could write before killing a worker: the
    replaced envs then played the stream of a seed the attacker chose (an
    attacker's pass, 2026-12-06). The owner now passes the pool's current
    seed (the config's, then each reseed's) to the replacement itself."""
    assert _restarted_stream(True) == _restarted_stream(False)


_CLOSING_WHILE_STARTING = """
import glob, mmap, os, threading, time, numpy as np, shmatari
from shmatari import _core
at = _core.MEMBERS["shmatari_header"]["pool_state"][0]
stop = False

def writer():  # another process's writes, while the workers build their envs
    while not stop:
        for path in glob.glob(f"/dev/shm/shmatari_{os.getpid()}_*"):
            try:
                with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
                    mm[at:at + 4] = np.uint32(_core.POOL_CLOSING).tobytes()
            except (OSError, ValueError):
                pass
        time.sleep(0.001)

t = threading.Thread(target=writer, daemon=True)
t.start()
env = None
try:
    env = shmatari.make("Breakout", 2, num_workers=2)
    env.reset()  # (where both workers were ready before they read the word)
    print("made")
except shmatari.WorkerError as exc:
    print("WorkerError:", exc)
stop = True
t.join()
if env is not None:
    env.close()
time.sleep(0.3)
print("left:", sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"shmatari_{os.getpid()}_")))
"""


def test_pool_state_written_closing_while_the_pool_starts_is_named():
    """pool_state written CLOSING while the workers built their envs made
    them exit with status 0, and make() said "worker 0 died: exit code 0",
    naming the worker (an attacker's pass, 2026-12-06). The error now says
    that the owner, not closing the pool, did not write the word."""
    proc = subprocess.run([sys.executable, "-c", _CLOSING_WHILE_STARTING],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert ("died: exit code 0: a worker ends so when it reads the pool's state as CLOSING, "
            "which its owner, not closing the pool, did not write: another process wrote "
            "pool_state" in proc.stdout), proc.stdout
    assert "left: []" in proc.stdout, proc.stdout


def test_pool_state_written_closing_under_restart_workers_is_named(no_leaks):
    """Under restart_workers, pool_state written CLOSING while the pool ran
    gave "the pool's owner (pid N: ...) is closing the pool", N the trainer
    itself, which was closing nothing, or restarted the workers it ended six
    times before it gave up (an attacker's pass, 2026-12-06). The owner now
    says that another process wrote the word, and restarts nothing."""
    env = shmatari.make("null", num_envs=2, num_workers=1, seed=0, restart_workers=True)
    try:
        env.reset()
        other = shm.attach(env.segment_name)  # as any process of this user may
        try:
            at = _core.MEMBERS["shmatari_header"]["pool_state"][0]
            state = np.ndarray((1,), np.uint32, other.buf, at)
            state[0] = _core.POOL_CLOSING
            del state
        finally:
            other.close()
        with pytest.raises((shmatari.PoolClosedError, shmatari.WorkerError)) as err:
            for _ in range(20):
                env.step(np.zeros(2, np.int64), timeout=10)
        # the wait sees the word (the owner says it is not closing) or the
        # workers' exit first (their status 0 named): either way, the word
        text = str(err.value)
        assert re.search(rf"pool_state, reads CLOSING, but its owner \(this process, pid "
                         rf"{os.getpid()}\) is not closing it: another process wrote "
                         rf"pool_state|exit code 0: a worker ends so when it reads the pool's "
                         rf"state as CLOSING, which its owner, not closing the pool, did not "
                         rf"write: another process wrote pool_state$", text), text
        assert env._supervisor.restarts == [0], "restarted workers that end at once"
    finally:
        env.close()


_STANDARD_FDS = """
import os, sys, shmatari
env = shmatari.make("Breakout", num_envs=2, num_workers=2, seed=0)
env.reset()
fds = {pid: [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in (0, 1, 2)]
       for pid in env.worker_pids + [os.getpid()]}
with open(sys.argv[1], "w") as f:
    f.write(repr(("/dev/shm/" + env.segment_name, fds)))
env.close()
"""


@pytest.mark.parametrize("closed", [0, 1, 2])
def test_a_trainer_started_with_a_standard_fd_closed_keeps_it_off_the_segment(closed,
                                                                              tmp_path):
    """A trainer started with ``>&-`` had its first opens take fd 1: the
    zygote socket in the trainer, the segment in every worker, so a C-level
    write to standard output (a library's message) would have gone into the
    pool's header (an attacker's pass, 2026-12-06). Each closed standard
    descriptor is now /dev/null before a socket or segment is opened."""
    import ast

    out = tmp_path / "fds.txt"
    proc = subprocess.run([sys.executable, "-c", _STANDARD_FDS, str(out)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120, preexec_fn=lambda: os.close(closed))
    assert proc.returncode == 0, proc.stderr
    segment, fds = ast.literal_eval(out.read_text())
    assert len(fds) == 3
    for pid, targets in fds.items():
        assert targets[closed] == "/dev/null", (pid, targets)
        assert segment not in targets and not any(t.startswith("socket:") for t in targets)


_READY_WORKERS_REWRITTEN = """
import glob, mmap, os, sys, time
import numpy as np
import shmatari
from shmatari import _core
orig = _core.mark_worker
at = _core.MEMBERS["shmatari_header"]["ready_workers"][0]
begin = time.monotonic()

def mark(seg, worker, state, *args, **kwargs):
    # In the forked workers: as worker 0 gets ready, another process writes
    # ready_workers = 2 (every worker) while worker 1 still builds its envs.
    if state == _core.WORKER_READY:
        if worker == 0:
            path, = glob.glob(f"/dev/shm/shmatari_{os.getppid()}_*")
            with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
                mm[at:at + 4] = np.uint32(2).tobytes()
        else:
            time.sleep(1.5)
    return orig(seg, worker, state, *args, **kwargs)

_core.mark_worker = mark
try:
    shmatari.make("Breakout", 2, num_workers=2, start_method="fork")
    print("made after", round(time.monotonic() - begin, 1))
except shmatari.WorkerError as exc:
    print("WorkerError after", round(time.monotonic() - begin, 1), exc)
time.sleep(0.5)
print("left:", sorted(n for n in os.listdir("/dev/shm")
                      if n.startswith(f"shmatari_{os.getpid()}_")))
"""


def test_a_ready_workers_word_rewritten_while_the_pool_starts_is_refused():
    """The owner waited for ``ready_workers`` to reach ``num_workers``, a
    word any mapping process can write: written early, ``make()`` returned
    and ``serve`` printed "ready" while workers still built their envs, and
    the server then stopped on the word (an attacker's pass, 2026-12-06).
    Each worker now also writes a line into its own pipe once it is ready;
    the owner waits for those, then finds the word wrong (2 written, plus
    each worker's count: 4) and refuses the pool, leaving nothing behind."""
    proc = subprocess.run([sys.executable, "-c", _READY_WORKERS_REWRITTEN],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "WorkerError after" in proc.stdout, proc.stdout + proc.stderr
    # it waited for worker 1, which was ready 1.5 s after worker 0
    assert float(proc.stdout.split("WorkerError after ")[1].split()[0]) >= 1.5, proc.stdout
    assert ("the segment's ready_workers word is 4 with all 2 workers ready (each said so "
            "through its own pipe): another process wrote it while the pool started"
            in proc.stdout), proc.stdout
    assert "left: []" in proc.stdout, proc.stdout


@pytest.mark.parametrize("call", ["step", "recv"])
def test_a_claim_word_another_process_rewrote_is_named_at_the_next_call(no_leaks, call):
    """Zeroing the header's client_pid let a second process attach and step
    the same envs while the first client went on, and the first then read
    the other's results as its own, or failed on the counters with a message
    that named no second client (an attacker's pass, 2026-12-05). The
    client now reads the word at every send and after every wait: the next
    call raises PoolClosedError naming it, and the pool is broken."""
    import mmap

    env = shmatari.make("null", num_envs=4, num_workers=2, batch_size=2, seed=0)
    try:
        env.async_reset()
        env.recv()
        at = _core.MEMBERS["shmatari_header"]["client_pid"][0]
        with open(f"/dev/shm/{env.segment_name}", "r+b") as f, \
                mmap.mmap(f.fileno(), 0) as mm:  # another process's mapping
            assert np.frombuffer(mm, np.int32, 1, at)[0] == os.getpid()
            if call == "recv":
                env.send(np.zeros(2, np.int64))
            mm[at:at + 4] = np.int32(0).tobytes()
            with pytest.raises(shmatari.PoolClosedError,
                               match=rf"client word \(client_pid\) reads 0, not this "
                                     rf"client's pid {os.getpid()}: another process rewrote it"):
                env.step(np.zeros(2, np.int64)) if call == "step" else env.recv(timeout=5)
        with pytest.raises(shmatari.PoolClosedError, match="broken"):
            env.reset()
    finally:
        env.close()


def _final_env_ids(env, other):
    """Every slot's final-record ``env_id`` array, as another process of this
    user maps it (``other``: its own mapping of the pool's segment)."""
    h = env._client._seg.header()
    return [np.ndarray((env.batch_size,), np.int32, other.buf,
                       h["slots_offset"] + s * h["slot_bytes"] + h["slot_final_offset"]
                       + h["slot_field_offset"][0])
            for s in range(h["ring_depth"])]


def test_a_final_record_no_worker_wrote_is_not_read():
    """A same-step pool's final records are written only in rows that hold
    one (``FLAG_FINAL``). Until 2026-12-06 the client bounded every row's
    final ``env_id``: -1 written by another process into a row without one
    raised ValueError after the batch was taken, its results were lost and
    the pool went on out of step (an attacker's pass). Such rows are now
    not read; the rows that end still carry their own final records."""
    with shmatari.make("Pong", num_envs=4, num_workers=2, seed=0, autoreset_mode="same_step",
                       max_episode_steps=3) as env:
        env.reset()
        other = shm.attach(env.segment_name)  # as any process of this user may
        try:
            for ids in _final_env_ids(env, other):
                ids[:] = -1
            del ids
            env.step(np.zeros(4, np.int64))
            env.reset(options={"reset_mask": np.array([True, False, False, False])})
            ended = 0  # env 0's episodes now end a step after the others'
            for t in range(12):
                obs, reward, terminated, truncated, info = env.step(np.zeros(4, np.int64))
                if "_final_obs" in info:
                    ended += int(info["_final_obs"].sum())
                    fin = info["final_info"]
                    np.testing.assert_array_equal(fin["env_id"][info["_final_obs"]],
                                                  info["env_id"][info["_final_obs"]])
            assert ended == 16  # 3 steps an episode: each env's 4 ends in 12 steps, env 0's
            # a step after the others' (batches with rows without final records)
        finally:
            other.close()


def test_a_final_record_rewritten_after_its_worker_breaks_the_pool():
    """A final record whose ``env_id`` is not its row's env (rewritten by
    another process between the worker's write and the client's copy) is
    refused once the batch is taken: PoolClosedError, and the pool is broken,
    not left out of step with a ValueError (an attacker's pass, 2026-12-06)."""
    from shmatari.errors import PoolClosedError

    with shmatari.make("Pong", num_envs=4, num_workers=2, seed=0, autoreset_mode="same_step",
                       max_episode_steps=1) as env:
        env.reset()
        other = shm.attach(env.segment_name)
        stop = threading.Event()
        try:
            slots = _final_env_ids(env, other)

            def rewrite():
                while not stop.is_set():
                    for ids in slots:
                        ids[:] = 99

            writer = threading.Thread(target=rewrite, daemon=True)
            writer.start()
            with pytest.raises(PoolClosedError, match=r"cannot go on: batch \d+ row \d holds a "
                                                      r"final record of env_id 99, not its "
                                                      r"row's env \d"):
                for t in range(2000):  # every step ends every episode (one step each)
                    env.step(np.zeros(4, np.int64))
            with pytest.raises(PoolClosedError):
                env.step(np.zeros(4, np.int64))
        finally:
            stop.set()
            writer.join()
            del slots
            other.close()


def test_a_failed_workers_text_starts_with_its_cause_and_keeps_frames():
    """The cause on the first line (a C client's message holds the first
    512 bytes), cut so that a huge one leaves the traceback's frames in the
    4 KiB error area (a review: a 5,000-character message filled it, twice
    over, and WorkerError.worker_traceback showed no frame); a message with
    notes or lines, or whose str() raises, is still written."""
    from shmatari.worker import CAUSE_CHARS, failure_text

    def raised(exc):
        try:
            raise exc
        except BaseException as e:  # noqa: BLE001
            return e

    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no")

    area = _core.ERROR_BYTES - 1
    huge = failure_text(3, 42, raised(ValueError("z" * 5000)))
    kept = huge.encode()[:area].decode("utf-8", "replace")
    assert kept.startswith("worker 3 (pid 42) failed: ValueError: " + "z" * 10)
    assert kept.split("\n", 1)[0].endswith("z ...")
    assert len(kept.split("\n", 1)[0]) < CAUSE_CHARS + 60
    assert "Traceback (most recent call last):" in kept and "in raised" in kept, kept
    noted = raised(ValueError("bad\nsecond line"))
    noted.add_note("a note")
    text = failure_text(0, 1, noted)
    assert text.startswith("worker 0 (pid 1) failed: ValueError: bad\nsecond line\na note\n")
    assert text.rstrip().endswith("a note")
    # a huge chained exception comes after the raised one's own frames
    def chained():
        try:
            raise ValueError("z" * 5000)
        except ValueError as inner:
            raise RuntimeError("the env's step failed") from inner

    try:
        chained()
    except RuntimeError as e:
        text = failure_text(0, 1, e)
    kept = text.encode()[:area].decode("utf-8", "replace")
    assert kept.startswith("worker 0 (pid 1) failed: RuntimeError: the env's step failed\n")
    assert "in chained" in kept and "chained to it (its cause):" in kept, kept
    assert kept.index("RuntimeError: the env's step failed", 30) < kept.index("zzz")
    first = failure_text(0, 1, raised(Unprintable())).split("\n", 1)[0]
    assert first.startswith("worker 0 (pid 1) failed: ") and \
        first.endswith("Unprintable: <exception str() failed>"), first
