"""Holding back Ctrl-C while something must not be cut in half.

Used around starting processes (so that a started worker or zygote is on
record before the KeyboardInterrupt comes), cleaning up, and importing
native code (ale-py, Gymnasium's NumPy), where a KeyboardInterrupt raised
inside an extension can abort the process or come out as another error.
"""

import contextlib
import os
import signal
import threading


@contextlib.contextmanager
def deferred_sigint():
    """Holds back Ctrl-C for the block: a SIGINT that arrives meanwhile
    is raised (as its handler would) once the block is done. Python runs
    signal handlers in the main thread only; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(frame))
    except (ValueError, TypeError):  # not the main interpreter, or no signals
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            if callable(previous):
                previous(signal.SIGINT, caught[0])
            elif previous == signal.SIG_DFL:
                os.kill(os.getpid(), signal.SIGINT)
