"""``shmatari``: the command line. ``shmatari serve`` runs a pool for other processes.

``shmatari serve Breakout --num-envs 32 --name demo`` starts the workers and the
segment ``/dev/shm/shmatari_demo``, prints the name to attach to, and serves
until SIGINT or SIGTERM; then it stops the workers and removes the segment. It
does the same, with exit status 1, when a worker fails or dies. Clients attach
with ``shmatari.attach("demo")`` (Python) or ``shmatari_attach(&c, "demo", ...)``
(C/C++, ``csrc/include/shmatari/shmatari.h``), one at a time; a client that
detaches or dies leaves the pool running for the next.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time

from . import _core, config as _config, shm

__all__ = ["main", "serve"]

#: Pool names: a letter first (so no name looks like an automatic
#: ``<pid>_<hex>`` one), then letters, digits, ``_`` and ``-``. 20 characters
#: at most keeps ``/shmatari_<name>`` within macOS's 31.
NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,19}")

#: Seconds between the server's checks of its workers and its client.
_POLL = 0.1


class _Stop(BaseException):
    """SIGINT or SIGTERM, raised in the main thread."""


def _on_stop_signal(signum, frame):
    raise _Stop()


def _log(msg: str) -> None:
    print(f"shmatari serve: {msg}", file=sys.stderr, flush=True)


def _free_name(segment: str) -> None:
    """Makes ``segment`` available: removes it if its server is dead.

    Raises:
        SystemExit: a live server already serves it, or it is not a pool.
    """
    try:
        mapped = shm.attach(segment)
    except FileNotFoundError:
        return
    except ValueError:  # an empty file: a server being created, or debris
        owner, alive = 0, False
    else:
        seg = None
        try:
            seg = _core.Segment(mapped.buf)
            # the owner's pid and start time (Segment.owner_alive)
            owner, alive = seg.header()["owner_pid"], seg.owner_alive()
        except ValueError:
            owner, alive = -1, False
        finally:
            if seg is not None:
                seg.release()
            del seg
            mapped.close()
    if owner == -1:
        raise SystemExit(f"shmatari serve: {shm.SHM_DIR}/{segment} exists and is not a "
                         f"shmatari pool; choose another --name")
    if owner and alive:
        raise SystemExit(f"shmatari serve: the name is taken: pid {owner} already serves "
                         f"{shm.SHM_DIR}/{segment}; choose another --name or stop it")
    _log(f"removing {shm.SHM_DIR}/{segment}, left by a server that died (pid {owner})")
    shm.unlink(segment)


def serve(cfg: _config.EnvConfig, name: str | None, out=sys.stdout) -> int:
    """Serves a pool until SIGINT / SIGTERM (returns 0) or a worker failure
    (returns 1). Prints one line ``ready name=... segment=... pid=...`` to
    ``out`` once clients may attach."""
    from .env import ShmVectorEnv
    from .errors import WorkerError

    segment = _core.segment_name(name) if name else shm.new_name()
    if name:
        _free_name(segment)
    # Both handled explicitly: a shell starts background jobs with SIGINT
    # ignored, and Python would keep it so.
    previous = {sig: signal.signal(sig, _on_stop_signal)
                for sig in (signal.SIGINT, signal.SIGTERM)}
    env = None
    try:
        env = ShmVectorEnv(cfg, segment_name=segment, claim=False)
        seg = env._seg
        shape = env.single_observation_space.shape
        _log(f"{cfg.game}: {env.num_envs} envs, batch_size {env.batch_size}, "
             f"{env.num_workers} workers, obs uint8 {shape}, "
             f"{env.single_action_space.n} actions, autoreset {cfg.autoreset_mode}, "
             f"seed {cfg.seed}")
        attach_name = name or segment
        print(f"ready name={attach_name} segment={segment} pid={os.getpid()}", file=out,
              flush=True)
        _log(f'attach with shmatari.attach("{attach_name}") or '
             f'shmatari_attach(&client, "{attach_name}", timeout_ns); Ctrl-C stops')
        client, reported_dead = 0, False
        while True:
            time.sleep(_POLL)
            env._check_workers()
            now = seg.header()["client_pid"]
            if now != client:
                if client and not reported_dead:
                    _log(f"client pid {client} detached" if not now else
                         f"client pid {client} is gone; pid {now} took over")
                if now:
                    _log(f"client pid {now} attached")
                client, reported_dead = now, False
            elif client and not reported_dead and not _core.pid_alive(client):
                _log(f"client pid {client} died; the next client to attach takes over")
                reported_dead = True
    except _Stop:
        _log("stopping")
        return 0
    except WorkerError as exc:
        _log(f"stopping: {exc}")
        return 1
    finally:
        # A second Ctrl-C or SIGTERM must not cut the cleanup short (it is
        # bounded: workers get a few seconds, then are killed).
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        try:
            if env is not None:
                env.close()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _option_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per env option of :func:`shmatari.make`, typed by its default."""
    group = parser.add_argument_group("env options (as shmatari.make; default: ALE v5)")
    for key, default in _config.OPTION_DEFAULTS.items():
        flag = "--" + key.replace("_", "-")
        kw = dict(dest=key, default=argparse.SUPPRESS, help=f"default {default}")
        if isinstance(default, bool):
            group.add_argument(flag, action=argparse.BooleanOptionalAction, **kw)
        elif key == "max_episode_frames":
            group.add_argument(flag, type=lambda v: None if v.lower() == "none" else int(v),
                               metavar="FRAMES|none", **kw)
        elif key == "autoreset_mode":
            group.add_argument(flag, choices=_config.AUTORESET_MODES, **kw)
        else:
            group.add_argument(flag, type=type(default), **kw)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="shmatari", description=__doc__.split("\n\n")[0],
                                allow_abbrev=False)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve a pool of Atari envs to a client process",
                       description=__doc__.split("\n\n")[1], allow_abbrev=False)
    s.add_argument("game", help="the game: Breakout, ALE/Breakout-v5, breakout, ...")
    s.add_argument("--num-envs", type=int, default=8, help="envs in the pool (default 8)")
    s.add_argument("--batch-size", type=int, default=None,
                   help="results per batch (default num_envs: synchronous)")
    s.add_argument("--num-workers", type=int, default=None,
                   help="worker processes (default: the cores available, at most num_envs)")
    s.add_argument("--seed", type=int, default=None, help="pool seed (default: fresh entropy)")
    s.add_argument("--start-method", default=None, choices=_config.START_METHODS)
    s.add_argument("--preset", default=None, choices=sorted(_config.PRESETS),
                   help="a named set of env options (see shmatari.make); flags override it")
    s.add_argument("--name", default=None,
                   help="pool name for clients (segment /dev/shm/shmatari_NAME; a letter, "
                        "then up to 19 letters, digits, _ or -); default: an automatic "
                        "shmatari_<pid>_<hex>, printed")
    _option_flags(s)
    return p


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    opts = vars(args)
    if args.name is not None and not NAME_RE.fullmatch(args.name):
        parser.error(f"--name must be a letter then up to 19 letters, digits, '_' or '-', "
                     f"got {args.name!r}")
    try:
        cfg = _config.build_config(
            args.game, args.num_envs, batch_size=args.batch_size,
            num_workers=args.num_workers, seed=args.seed, start_method=args.start_method,
            preset=args.preset, **{k: opts[k] for k in _config.OPTION_DEFAULTS if k in opts})
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    return serve(cfg, args.name)


if __name__ == "__main__":
    sys.exit(main())
