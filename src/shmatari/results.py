"""The ``info`` dict of a batch of results, built one way for every client
(:class:`shmatari.ShmVectorEnv` and the pipe baseline)."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from . import _core

__all__ = ["build_info", "batch_info", "add_episode"]

#: Fields that make up an episode's statistics.
_EPISODE_FIELDS = ("episode_done", "episode_return", "elapsed_step", "episode_frame_number")


#: The per-env arrays of ``info``: ``_core.per_env_info`` (C, the step
#: path: a dict built in Python there costs several microseconds a batch on
#: the cache a worker left) builds them from the fields.
_per_env = _core.per_env_info


def add_episode(info: dict, fields: Mapping[str, np.ndarray], any_done: bool | None = None) -> None:
    """Adds ``episode`` (``r``, ``l``, ``frames``, zero in rows that did not
    end a game) and ``_episode`` to ``info`` when a row of ``fields`` has
    ``episode_done`` (``any_done``: whether one has, if the caller knows)."""
    if any_done is False:  # the caller knows that no row ended a game
        return
    done = fields["episode_done"].view(bool)
    if any_done or done.any():
        info["episode"] = {
            "r": np.where(done, fields["episode_return"], 0.0),
            "l": np.where(done, fields["elapsed_step"], 0).astype(np.int32),
            "frames": np.where(done, fields["episode_frame_number"], 0).astype(np.int64),
        }
        info["_episode"] = done


def batch_info(fields: Mapping[str, np.ndarray], bits: int, episode_statistics: bool = True) -> dict:
    """:func:`build_info` with no final records (``final`` None), the
    client's step path: ``fields`` with ``_reset`` / ``_restarted`` /
    ``_final`` (as ``Segment.collect`` returns them) and the batch's
    ``bits``; one call where ``build_info``'s checks and keywords cost a
    few tenths of a microsecond a batch more."""
    info = _per_env(fields)
    if episode_statistics and bits & _core.BATCH_DONE:
        add_episode(info, fields, True)
    return info


def build_info(fields: Mapping[str, np.ndarray], final: Mapping[str, np.ndarray] | None = None,
               final_obs: np.ndarray | None = None, bits: int | None = None,
               episode_statistics: bool = True) -> dict:
    """The info dict of a batch (see :class:`shmatari.ShmVectorEnv` for its keys).

    Args:
        fields: every slot field by name (``_core.FIELDS``), each shape
            ``(n,)``, owned by the caller: arrays may be kept in the dict;
            with ``_reset`` / ``_restarted`` / ``_final``, the flags' bits as
            bool (``_core.COLLECTED``, from ``Segment.collect``), or without
            them (then ``_core.row_bits`` reads them).
        final: the rows' final records (same-step pools), as ``fields``; read
            only in rows whose flags hold ``FLAG_FINAL``. None: no final records.
        final_obs: uint8, shape ``(n, *obs_shape)``: the final observations,
            owned by the caller, or None.
        bits: the batch's ``_core.BATCH_*`` bits, from ``Segment.collect``
            with ``fields``.
        episode_statistics: False leaves ``episode`` / ``_episode`` out (here
            and in ``final_info``), for Gymnasium's ``RecordEpisodeStatistics``.

    Returns:
        dict: the per-env arrays; ``episode`` / ``_episode`` when some row
        ended a game; with final records, ``final_obs`` (an object array
        holding the final observation of each row that has one and None
        elsewhere, as Gymnasium's ``SyncVectorEnv``), ``final_info`` (the
        done steps' own info, zero elsewhere) and the masks ``_final_obs``,
        ``_final_info``.
    """
    if "_reset" not in fields:
        rows, bits = _core.row_bits(fields["flags"], fields["episode_done"].view(np.uint8))
        fields = dict(fields, **rows)
    if final is None:
        return batch_info(fields, bits, episode_statistics)
    info = _per_env(fields)
    has_final = fields["_final"]
    if not bits & _core.BATCH_FINAL:
        if episode_statistics:
            add_episode(info, fields)
        return info
    if "_reset" not in final:  # final records given as plain fields (the pipe baseline)
        final = dict(final, **_core.row_bits(final["flags"],
                                             final["episode_done"].view(np.uint8))[0])
    kept = {k: np.where(has_final, v, np.zeros((), v.dtype)) for k, v in final.items()}
    final_info = _per_env(kept)
    if episode_statistics:
        add_episode(final_info, kept)
        add_episode(info, {k: np.where(has_final, final[k], fields[k])
                            for k in _EPISODE_FIELDS})
    objs = np.full(has_final.shape[0], None, dtype=object)
    for i in np.flatnonzero(has_final):
        objs[i] = final_obs[i]
    info["final_obs"] = objs
    info["_final_obs"] = has_final
    info["final_info"] = final_info
    info["_final_info"] = has_final.copy()
    return info
