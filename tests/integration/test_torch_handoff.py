"""Observations reach torch as the trainer expects: dtype, shape, values, no hidden copy."""

from __future__ import annotations

import numpy as np
import pytest

import shmatari

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_obs_as_torch_tensor_shares_memory_and_matches():
    with shmatari.make("Breakout", num_envs=2, num_workers=1, seed=0) as env:
        obs, _ = env.reset()
        t = torch.from_numpy(obs)
        assert t.dtype == torch.uint8 and tuple(t.shape) == (2, 4, 84, 84)
        assert t.data_ptr() == obs.ctypes.data          # no copy on the way in
        for _ in range(5):
            obs, *_ = env.step(np.zeros(2, dtype=np.int64))
        t = torch.from_numpy(obs)
        assert torch.equal(t, torch.as_tensor(obs.copy()))
        assert int(t.max()) > 0
