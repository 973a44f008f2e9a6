"""shmatari's documented per-env semantics, written plainly with ALE's own
grayscale/RGB conversion and OpenCV: the reference the compiled core is
tested against. Default options only (no episodic life, no FIRE reset)."""

from __future__ import annotations

import cv2
import numpy as np
from ale_py import ALEInterface, LoggerMode, roms

from shmatari import seeding


class ReferenceAtari:
    def __init__(self, game: str, index: int, seed: int, *, frame_skip=4, noop_max=30,
                 stack_num=4, img_height=84, img_width=84, repeat_action_probability=0.25,
                 grayscale=True, maxpool=True, max_episode_frames=108_000,
                 full_action_space=False):
        ALEInterface.setLoggerMode(LoggerMode.Error)
        self.ale = ale = ALEInterface()
        ale.setInt("random_seed", seeding.ale_seed(seed, index))
        ale.setFloat("repeat_action_probability", repeat_action_probability)
        ale.loadROM(roms.get_rom_path(game))
        self.actions = ale.getLegalActionSet() if full_action_space else ale.getMinimalActionSet()
        self.rng = seeding.noop_rng(seed, index)
        self.frame_skip, self.noop_max, self.stack_num = frame_skip, noop_max, stack_num
        self.size = (img_width, img_height)
        self.grayscale, self.maxpool = grayscale, maxpool
        self.max_episode_frames = max_episode_frames
        self.needs_reset = True
        self.stack = []

    def _screen(self):
        shape = tuple(self.ale.getScreenDims())
        if self.grayscale:
            out = np.empty(shape, np.uint8)
            self.ale.getScreenGrayscale(out)
        else:
            out = np.empty(shape + (3,), np.uint8)
            self.ale.getScreenRGB(out)
        return out

    def _obs(self):
        return np.stack(self.stack)

    def reset(self):
        self.ale.reset_game()
        self.episode_frames = self.ale.getEpisodeFrameNumber()  # a game's starting frames
        noops = int(self.rng.integers(1, self.noop_max + 1)) if self.noop_max else 0
        for _ in range(noops):
            self.ale.act(0)
            self.episode_frames += 1
            if self.ale.game_over(with_truncation=False) or \
                    0 < self.max_episode_frames <= self.episode_frames:
                self.ale.reset_game()
                self.episode_frames = self.ale.getEpisodeFrameNumber()
        frame = cv2.resize(self._screen(), self.size, interpolation=cv2.INTER_AREA)
        self.stack = [frame] * self.stack_num
        self.needs_reset = False
        return self._obs()

    def step(self, action: int):
        """Returns (obs, reward, terminated, truncated)."""
        if self.needs_reset:
            return self.reset(), 0.0, False, False
        reward, frames = 0.0, []
        terminated = truncated = False
        for _ in range(self.frame_skip):
            reward += self.ale.act(self.actions[action])
            self.episode_frames += 1
            frames.append(self._screen())
            terminated = self.ale.game_over(with_truncation=False)
            truncated = 0 < self.max_episode_frames <= self.episode_frames
            if terminated or truncated:
                break
        pooled = np.maximum(frames[-2], frames[-1]) if self.maxpool and len(frames) >= 2 else frames[-1]
        self.stack = self.stack[1:] + [cv2.resize(pooled, self.size, interpolation=cv2.INTER_AREA)]
        self.needs_reset = terminated or truncated
        return self._obs(), reward, terminated, truncated
