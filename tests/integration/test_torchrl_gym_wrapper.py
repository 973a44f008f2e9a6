"""TorchRL's GymWrapper on a shmatari pool. TorchRL (0.14, Gymnasium >= 1.1)
accepts vector envs whose autoreset mode is DISABLED (preferred: it resets
done envs itself with options={"reset_mask": ...}) or SAME_STEP, and refuses
NEXT_STEP, shmatari's default."""

from __future__ import annotations

import numpy as np
import pytest

import shmatari

torch = pytest.importorskip("torch")
pytest.importorskip("torchrl")

from torchrl.envs import GymWrapper  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.mark.parametrize("mode", ["disabled", "same_step"])
def test_gym_wrapper_collects_across_episode_ends(mode):
    # A 100-frame cap ends every game at step 25 (no no-ops).
    pool = shmatari.make("Breakout", num_envs=4, seed=0, num_workers=2, autoreset_mode=mode,
                         noop_max=0, max_episode_frames=100)
    env = GymWrapper(pool)
    try:
        assert tuple(env.batch_size) == (4,)
        td = env.rollout(80, break_when_any_done=False)             # 320 frames
        assert tuple(td.batch_size) == (4, 80)
        obs = td["next", "observation"]
        assert obs.dtype == torch.uint8 and tuple(obs.shape[-3:]) == (4, 84, 84)
        done = td["next", "truncated"].squeeze(-1)
        assert done[:, 24].all() and done[:, 49].all()              # steps 25 and 50
        assert int(done.sum()) == 4 * 3
        # After a done step the next episode starts from a reset: a stack of
        # one frame repeated.
        first = td["observation"][:, 25]
        assert all(torch.equal(first[i, 0], first[i, 3]) for i in range(4))
    finally:
        env.close()
        pool.close()


def test_gym_wrapper_refuses_next_step_and_says_which_modes_work():
    with shmatari.make("Pong", num_envs=2, num_workers=1) as pool:
        with pytest.raises(RuntimeError, match="SAME_STEP or DISABLED"):
            GymWrapper(pool)


def test_gym_env_on_the_single_env_id_collects_across_episode_ends():
    from torchrl.envs import GymEnv

    # TorchRL passes frameskip (ale-py's name) to gymnasium.make, and runs
    # num_envs single envs in Gymnasium's AsyncVectorEnv, whose processes it
    # spawns: the "module:id" form registers the ids there too (a script
    # that imports shmatari.registration at its top gets them anyway).
    # 100 frames at 4 a step, no no-ops: every game is truncated at step 25.
    env = GymEnv("shmatari.registration:shmatari/Breakout-v5", num_envs=4, frame_skip=4,
                 noop_max=0,
                 max_num_frames_per_episode=100)
    try:
        assert tuple(env.batch_size) == (4,)
        td = env.rollout(30, break_when_any_done=False)
        assert tuple(td["next", "observation"].shape) == (4, 30, 4, 84, 84)
        done = td["next", "done"].squeeze(-1)
        assert done[:, 24].all() and int(done.sum()) == 4
    finally:
        env.close()


def test_gym_wrapper_on_the_envpool_adapter_gives_torchrls_clear_error():
    import shmatari.envpool as envpool

    # The adapter is next-step, as EnvPool's; it says so, and TorchRL refuses
    # it with the same message as a plain next-step pool (not AttributeError).
    with envpool.make("Breakout-v5", num_envs=4) as adapter:
        assert adapter.autoreset_mode == adapter.pool.autoreset_mode
        with pytest.raises(RuntimeError, match="SAME_STEP or DISABLED"):
            GymWrapper(adapter)
