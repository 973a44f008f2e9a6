"""The parts of a pool's Gymnasium surface beyond reset and step, for
:class:`shmatari.ShmVectorEnv`: ``render``, the per-env attribute API
(``call`` / ``get_attr`` / ``set_attr``, ``get_action_meanings``) and the
refusal to copy or pickle a pool."""

from __future__ import annotations

import numpy as np

__all__ = ["Closing", "VectorExtras"]


class Closing:
    """``with pool:`` closes the pool on the way out (local and Ray pools)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class VectorExtras(Closing):
    """Mixed into :class:`shmatari.ShmVectorEnv`, whose ``_client``,
    ``config``, spaces, ``action_set`` and ``segment_name`` it reads."""

    def render(self) -> tuple[np.ndarray, ...]:
        """The envs' full-size RGB frames, as ale-py's ``render()`` and
        Gymnasium's vector envs give them (so ``RecordVideo`` works).

        The pool must be made with ``render_mode="rgb_array"``: its workers
        then keep each env's last screen (ALE palette indices, and the RGB
        palette learned from ALE's ``getScreenRGB``) in the segment, a copy
        of about 34 KB per result; without it nothing is kept or written.

        Returns:
            tuple: ``num_envs`` uint8 arrays of shape ``(H, W, 3)``, the
            game's own screen (``shmatari.games.screen_shape``: 210 x 160
            for most games), each the screen of the env's latest result;
            ``np.stack(env.render())`` is ``(num_envs, H, W, 3)``. Black
            before the first reset. In an async pool an env that is running
            may be mid-update: render after ``recv()`` the envs it returned.

        Raises:
            ValueError: the pool was made without ``render_mode="rgb_array"``.
            PoolClosedError: the pool is closed.
        """
        if self.render_mode != "rgb_array":
            raise ValueError("this pool does not render: make it with "
                             "render_mode='rgb_array'")
        return self._client.render()

    # -- per-env attributes (Gymnasium's call / get_attr / set_attr) ------------------
    def get_action_meanings(self) -> list[str]:
        """ALE's name of each action index (``"NOOP"``, ``"FIRE"``, ...), as
        ale-py's ``AtariEnv.get_action_meanings``; an id that ALE does not
        know (never from shmatari's workers: an attached pool's action ids
        are checked at attach) reads ``"UNKNOWN_<id>"``."""
        from ale_py import Action

        known = {a.value: a.name for a in Action}
        return [known.get(int(a), f"UNKNOWN_{int(a)}") for a in self.action_set]

    def _env_attributes(self) -> dict:
        """What every env of the pool answers to ``get_attr`` / ``call``."""
        attrs = {"action_space": self.single_action_space,
                 "observation_space": self.single_observation_space,
                 "render_mode": self.render_mode, "action_set": list(self.action_set),
                 "get_action_meanings": self.get_action_meanings,
                 "autoreset_mode": self.autoreset_mode,
                 # what every Gymnasium env has (SyncVectorEnv answers them;
                 # a Gymnasium-API pass, 2026-12-07): the pool's own
                 "metadata": self.metadata, "spec": self.spec}
        if self.config is not None:
            attrs["game"] = self.config.game
            attrs.update(self.config.env_options())
        else:  # attached: what the header says
            hdr = self._client._seg.header()
            attrs.update({k: hdr[k] for k in ("frame_skip", "stack_num", "img_height",
                                              "img_width")},
                         grayscale=hdr["channels"] == 1)
        return attrs

    def call(self, name: str, *args, **kwargs) -> tuple:
        """Calls method ``name`` of every env, or reads attribute ``name``, as
        Gymnasium's ``VectorEnv.call``.

        The envs live in worker processes, so what they answer to is fixed:
        ``get_action_meanings`` and ``render`` (methods: ``render`` gives
        each env's frame, as :meth:`render`), and the attributes of
        :meth:`get_attr`.

        Returns:
            tuple: one result per env (``num_envs`` entries).

        Raises:
            AttributeError: an unknown name, naming the known ones.
            TypeError: arguments given for an attribute that is not a method.
            ValueError: ``render`` in a pool made without
                ``render_mode="rgb_array"`` (as :meth:`render`).
        """
        if isinstance(name, str) and name == "render":
            return tuple(self.render(*args, **kwargs))
        attrs = self._env_attributes()
        if not isinstance(name, str) or name not in attrs:
            raise AttributeError(f"shmatari envs have no attribute {name!r}; call/get_attr "
                                 f"know: {', '.join(sorted(attrs))}")
        value = attrs[name]
        if callable(value) and not isinstance(value, type):
            return tuple(value(*args, **kwargs) for _ in range(self.num_envs))
        if args or kwargs:
            raise TypeError(f"{name!r} is an attribute, not a method: call it without arguments")
        return tuple(value for _ in range(self.num_envs))

    def get_attr(self, name: str) -> tuple:
        """Attribute ``name`` of every env, as Gymnasium's ``VectorEnv.get_attr``:
        ``action_space`` / ``observation_space`` (one env's), ``render_mode``,
        ``action_set`` (ALE action ids), ``autoreset_mode``, ``metadata`` and
        ``spec`` (the pool's, as every env's), ``game`` and
        every option of :func:`make` (``frame_skip``, ``grayscale``, ...; an
        attached pool knows the header's: ``frame_skip``, ``stack_num``,
        ``img_height``, ``img_width``, ``grayscale``).

        Returns:
            tuple: ``num_envs`` values.

        Raises:
            AttributeError: an unknown name.
        """
        return self.call(name)

    def set_attr(self, name: str, values) -> None:
        """Gymnasium's ``VectorEnv.set_attr``: not possible here. The envs live
        in worker processes and their options are fixed when the pool is made.

        Raises:
            AttributeError: always, saying what to do instead.
        """
        attrs = self._env_attributes()
        if name in attrs:
            raise AttributeError(f"cannot set {name!r}: shmatari envs' options and spaces "
                                 f"are fixed when the pool is made; make a new pool "
                                 f"with {name}=...")
        raise AttributeError(f"cannot set {name!r}: shmatari envs run in worker processes "
                             f"and have no attributes to set (get_attr knows: "
                             f"{', '.join(sorted(attrs))})")

    def __reduce_ex__(self, protocol):
        # copy.copy, copy.deepcopy, pickle and cloudpickle all come here: a
        # pool is its processes and its segment, which no copy can share.
        name = self.segment_name
        if getattr(self, "_claimed", False):
            # make()'s pools: this process is their client until it closes them
            where = ("call shmatari.make() there, or run the pool with `shmatari serve "
                     "GAME --name NAME` and shmatari.attach(\"NAME\") it from any one process "
                     "at a time (a pool made with make() has this process as its client "
                     "until it closes: no other process can attach to it)")
        else:
            where = (f"use shmatari.attach({name!r}) there once this process has closed "
                     f"its handle (one client at a time), or call shmatari.make() there")
        raise TypeError(
            f"a {type(self).__name__} cannot be copied or pickled: it is this process's handle "
            f"on worker processes and a shared-memory segment. In another process, {where}")

    def __copy__(self):
        self.__reduce_ex__(2)

    def __deepcopy__(self, memo):
        self.__reduce_ex__(2)
