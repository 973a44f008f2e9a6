"""Seed derivation: how env *i* of a pool gets its random streams.

A pool has one seed, a non-negative integer below 2**256 (``seed=None`` draws
128 bits of fresh entropy once, in the parent, exposed as
``env.seed_entropy``). Env *i* derives everything random from::

    numpy.random.SeedSequence(seed, spawn_key=(i,))

- ALE's ``random_seed`` (which drives sticky actions and every other random
  choice inside the emulator) is the first 32-bit word of that sequence's
  ``generate_state(1, numpy.uint32)``, with its top bit cleared
  (ALE takes a signed 32-bit int).
- The no-op counts at reset come from ``numpy.random.Generator(PCG64(
  SeedSequence(seed, spawn_key=(i, 0))))``, i.e. the sequence's first child.

So env *i*'s trajectory depends only on (seed, i, options, actions): not on
the number of workers, the start method, the parent's ``random`` or
``numpy.random`` state, or the clock; and pools with seeds 0 and 1 share no
stream (``seed + i`` schemes make them overlap). ``SeedSequence`` hashes its
entropy and spawn key with a published algorithm (O'Neill's seed_seq, as in
NumPy's ``bit_generator.pyx``), so a C++ program can reproduce it.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = [
    "SEED_BITS",
    "check_seed",
    "draw_entropy",
    "env_seed_sequence",
    "ale_seed",
    "noop_rng",
    "seed_to_words",
    "words_to_seed",
]

#: Seeds are integers in [0, 2**SEED_BITS).
SEED_BITS = 256


def check_seed(seed, name: str = "seed") -> int:
    """Validates a pool seed.

    Raises:
        TypeError: not an integer (bools and floats are refused).
        ValueError: negative or not below 2**256.
    """
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"{name} must be a non-negative int or None, got {type(seed).__name__} {seed!r}")
    seed = int(seed)
    if seed < 0 or seed >= 1 << SEED_BITS:
        raise ValueError(f"{name} must be in [0, 2**{SEED_BITS}), got {seed}")
    return seed


def draw_entropy() -> int:
    """128 bits of fresh OS entropy, as ``SeedSequence()`` draws them."""
    return int(np.random.SeedSequence().entropy)


def env_seed_sequence(seed: int, index: int) -> np.random.SeedSequence:
    """``SeedSequence(seed, spawn_key=(index,))``: env ``index``'s root sequence."""
    return np.random.SeedSequence(seed, spawn_key=(index,))


def ale_seed(seed: int, index: int) -> int:
    """The ``random_seed`` given to env ``index``'s ALE: an int in [0, 2**31)."""
    word = env_seed_sequence(seed, index).generate_state(1, np.uint32)[0]
    return int(word) & 0x7FFFFFFF


def noop_rng(seed: int, index: int) -> np.random.Generator:
    """Env ``index``'s generator for no-op counts: PCG64 on spawn key (index, 0)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(index, 0))))


def seed_to_words(seed: int, n: int = SEED_BITS // 64) -> list[int]:
    """Splits a seed into ``n`` uint64 words, least significant first."""
    return [(seed >> (64 * k)) & 0xFFFFFFFFFFFFFFFF for k in range(n)]


def words_to_seed(words) -> int:
    """Inverse of :func:`seed_to_words`."""
    return sum(int(w) << (64 * k) for k, w in enumerate(words))
