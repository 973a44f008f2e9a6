"""Segment.recover: the ring after a worker died mid-row, set up word by word.

A worker killed between reserving a result position and finishing its row
leaves states that a random SIGKILL hits too rarely to test reliably
(test_reliability.py kills workers for real); here each state is written
into a real segment by hand, at the offsets the C compiler gave
(``struct_layout``), and ``recover`` must say what the replacement writes.
"""

from __future__ import annotations

import numpy as np
import pytest

from shmatari import _core, shm

pytestmark = pytest.mark.usefixtures("no_leaks")

LAYOUT = _core.struct_layout()
ENV = LAYOUT["shmatari_env_ctrl"]
HDR = LAYOUT["shmatari_header"]
SLOT = LAYOUT["shmatari_slot_header"]


class Ring:
    """A segment of ``num_envs`` envs, two workers, ``batch_size``; no processes."""

    def __init__(self, num_envs: int, batch_size: int):
        depth = _core.min_ring_depth(num_envs, batch_size)
        header = _core.compute_layout(num_envs=num_envs, num_workers=2, batch_size=batch_size,
                                      ring_depth=depth, stack_num=1, img_height=2, img_width=2,
                                      channels=1, frame_skip=1)
        size = _core.header_words(header)["total_bytes"]
        self.shm = shm.create(shm.new_name(), size)
        self.buf = self.shm.buf
        self.buf[:len(header)] = header
        self.seg = _core.Segment(self.buf)
        half = num_envs // 2
        self.seg.set_worker_group(0, 0, half)
        self.seg.set_worker_group(1, half, num_envs)
        self.seg.refresh_groups()
        self.seg.clear_slots()
        self.hdr = self.seg.header()
        self.batch_size = batch_size

    def recover(self, groups) -> dict:
        """``Segment.recover``, with the client's record (a command in flight:
        req_seq != ack_seq; its count: req_seq) as the words set up by hand
        say, in the old form: ``{env: position}`` of the envs whose
        replacement answers first. Each env's ``seen`` is checked against
        the ack_seq the recovery leaves."""
        req = np.array([self.env(e, "req_seq")[0] for e in range(self.seg.num_envs)], np.uint32)
        ack = np.array([self.env(e, "ack_seq")[0] for e in range(self.seg.num_envs)], np.uint32)
        plan = self.seg.recover(groups, running=req != ack, posted=req)
        for e, (_, seen) in plan.items():
            assert self.env(e, "ack_seq")[0] == seen, (e, seen)
        return {e: pos for e, (pos, _) in plan.items() if pos >= -1}

    def group(self, w: int) -> range:
        """Worker ``w``'s envs, as set above."""
        b, e = self.seg.worker_group(w)
        return range(b, e)

    def close(self):
        self.seg.release()
        self.buf = None
        self.shm.close()
        shm.unlink(self.shm.name)

    def _word(self, offset: int, dtype) -> np.ndarray:
        return np.ndarray((1,), dtype, self.buf, offset)

    def env(self, e: int, field: str):
        dtype = np.uint64 if field == "results" else np.uint32
        return self._word(self.hdr["env_ctrl_offset"] + ENV["sizeof"] * e + ENV[field], dtype)

    def row(self, pos: int) -> np.ndarray:
        """The env_id element of position ``pos``."""
        slot = pos // self.batch_size
        off = self.seg.slot_offset(slot) + self.hdr["slot_field_offset"][0]
        return self._word(off + 4 * (pos % self.batch_size), np.int32)

    def set(self, *, consumed: int, alloc_pos: int = 0):
        self._word(HDR["consumed_batches"], np.uint64)[0] = consumed
        self._word(HDR["alloc_pos"], np.uint64)[0] = alloc_pos

    def done_count(self, batch: int) -> int:
        """Results written so far to the slot of batch ``batch``."""
        slot = batch % self.hdr["ring_depth"]
        off = self.seg.slot_offset(slot) + SLOT["done_count"]
        return int(self._word(off, np.uint32)[0])


@pytest.fixture
def ring(request):
    r = Ring(*request.param)
    yield r
    r.close()


@pytest.mark.parametrize("ring", [(4, 2)], indirect=True)
def test_async_hole_goes_to_the_dead_env_with_a_command_in_flight(ring):
    # Worker 1 (envs 2, 3) died. Env 2 had finished its row at position 0 but
    # not stored its ack; env 3 had reserved position 1 and written nothing.
    # Env 0 (worker 0) finished at position 2.
    ring.set(consumed=0, alloc_pos=3)
    for e in range(4):
        ring.env(e, "req_seq")[0] = 1
    ring.env(0, "ack_seq")[0] = 1
    ring.row(0)[0], ring.row(2)[0] = 2, 0
    plan = ring.recover([ring.group(1)])
    assert plan == {3: 1}             # the replacement fills the hole
    assert ring.env(2, "ack_seq")[0] == 1  # answered: its row is there
    assert ring.env(3, "ack_seq")[0] == 0  # still in flight
    assert ring.done_count(0) == 1 and ring.done_count(1) == 1


@pytest.mark.parametrize("ring", [(4, 4)], indirect=True)
def test_sync_row_is_rewritten_at_the_same_position(ring):
    # Batch 5 in flight. Envs 0, 1 (live) and 2 (dead, ack lost) finished;
    # env 3 had counted its result but died before committing the row.
    ring.set(consumed=5)
    for e in range(4):
        ring.env(e, "req_seq")[0] = 6
        ring.env(e, "results")[0] = 6
        ring.env(e, "ack_seq")[0] = 6 if e < 2 else 5
    for e in range(3):
        ring.row(5 * 4 + e)[0] = e
    plan = ring.recover([ring.group(1)])
    assert plan == {3: -1}
    assert ring.env(3, "results")[0] == 5  # publishes at 5 * 4 + 3 again
    assert ring.env(2, "results")[0] == 6 and ring.env(2, "ack_seq")[0] == 6
    assert ring.done_count(5) == 3


@pytest.mark.parametrize("ring", [(4, 2)], indirect=True)
def test_idle_dead_worker_needs_nothing_and_counts_are_recounted(ring):
    ring.set(consumed=1, alloc_pos=4)  # batch 1 complete, not yet taken
    for e in range(4):
        ring.env(e, "req_seq")[0] = ring.env(e, "ack_seq")[0] = 2
    ring.row(2)[0], ring.row(3)[0] = 3, 1
    assert ring.recover([ring.group(1)]) == {}
    assert ring.done_count(1) == 2


@pytest.mark.parametrize("ring", [(4, 2)], indirect=True)
def test_a_hole_no_dead_env_explains_is_an_error(ring):
    ring.set(consumed=0, alloc_pos=2)
    ring.row(0)[0] = 0  # position 1 is a hole, but every env is idle
    with pytest.raises(RuntimeError, match="never written"):
        ring.recover([ring.group(1)])


_FLIPPER = """
import mmap, os, sys
import numpy as np
path, offset = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, 0)
row = np.ndarray((1,), np.int32, m, offset)
print("flipping", flush=True)
while True:  # env 0's row, complete, then a hole, as fast as NumPy writes
    row[0] = 0
    row[0] = -1
"""


@pytest.mark.parametrize("ring", [(4, 2)], indirect=True)
def test_a_row_rewritten_during_recovery_is_judged_from_one_read(ring, tmp_path):
    """Recovery reads each row's env_id once and decides everything from that
    copy. It read the rows again in its hole search (found by reading the
    code, in an attacker's pass): a process toggling a row between complete
    and empty could have the row counted complete and also handed to a
    replacement as a hole, or the reverse, and the recovery then failed
    ("reserved but never written") or left a slot that never fills. With a
    process flipping env 0's row (position 2) all the while, every recovery
    must give one of the two answers of a single read of it."""
    import subprocess
    import sys

    # Worker 0 (envs 0, 1) died with a command in flight for both; worker 1's
    # envs (2, 3) finished at positions 0 and 1; position 3 is env 1's hole.
    flip_at = ring.seg.slot_offset(1) + ring.hdr["slot_field_offset"][0]
    proc = subprocess.Popen([sys.executable, "-c", _FLIPPER, f"/dev/shm/{ring.shm.name}",
                             str(flip_at)], stdout=subprocess.PIPE, text=True)
    seen = {"complete": 0, "hole": 0}
    try:
        assert proc.stdout.readline().strip() == "flipping"
        for _ in range(3000):
            ring.set(consumed=0, alloc_pos=4)
            for e in range(4):
                ring.env(e, "req_seq")[0] = 1
                ring.env(e, "ack_seq")[0] = 1 if e >= 2 else 0
            ring.row(0)[0], ring.row(1)[0], ring.row(3)[0] = 2, 3, -1
            plan = ring.recover([ring.group(0)])
            answered, count = int(ring.env(0, "ack_seq")[0]), ring.done_count(1)
            if plan == {1: 3}:  # read complete: env 0 answered, counted in slot 1
                assert (answered, count) == (1, 1), (plan, answered, count)
                seen["complete"] += 1
            else:  # read empty: env 0 rewrites its row, env 1 fills the hole
                assert plan == {0: 2, 1: 3} and (answered, count) == (0, 0), \
                    (plan, answered, count)
                seen["hole"] += 1
    finally:
        proc.kill()
        proc.wait()
    assert seen["complete"] and seen["hole"], seen  # the flips landed while recovering


_HOSTILE_COUNTERS = """
import sys
sys.path.insert(0, sys.argv[1])
from test_recover import Ring
ring = Ring(4, 2)
try:
    # begin = consumed * 2 wraps to 2**64 - 2; alloc_pos = 2**64 - 1: one
    # position, inside the ring's bound, so the recovery must scan it and stop
    ring.set(consumed=2 ** 63 - 1, alloc_pos=2 ** 64 - 1)
    try:
        print("plan", ring.recover([ring.group(0)]), flush=True)
    except RuntimeError as exc:
        print("refused", exc, flush=True)
finally:
    ring.close()
"""


def test_counters_near_2_to_the_64_do_not_keep_recovery_scanning():
    """consumed_batches and alloc_pos are segment words any process of the
    user can write. With consumed_batches near 2**64 / batch_size, the scan
    of the batches counted ``b * batch_size < alloc_pos`` on a product that
    wrapped: about 2**62 rounds, the owner stuck in recovery (a reviewer's
    reading, 2026-12-05). The scan counts positions from the first now, at
    most ring_depth * batch_size of them."""
    import pathlib
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _HOSTILE_COUNTERS,
                           str(pathlib.Path(__file__).parent)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the one position is empty and no dead env had a command in flight
    assert "refused result position 18446744073709551614 was reserved but never written" \
        in proc.stdout, proc.stdout
