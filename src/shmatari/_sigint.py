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
    signal handlers in the main thread only; elsewhere this does nothing.

    Yields a function, ``deliver()``, for a wait inside the block that may
    last (the zygote's answer): it runs the held-back SIGINT's handler now,
    raising what it raises, and returns if there was none or the handler
    returned (the wait then goes on). The caller must be ready for the
    exception, as for a Ctrl-C outside the block."""
    def nothing():
        pass

    if threading.current_thread() is not threading.main_thread():
        yield nothing
        return
    caught = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(frame))
    except (ValueError, TypeError):  # not the main interpreter, or no signals
        yield nothing
        return

    def deliver():
        if caught:
            frame = caught[0]
            caught.clear()
            if callable(previous):
                previous(signal.SIGINT, frame)
            elif previous == signal.SIG_DFL:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGINT)

    try:
        yield deliver
    finally:
        signal.signal(signal.SIGINT, previous)
        deliver()
