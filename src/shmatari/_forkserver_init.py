"""First module the fork server preloads (``start_method="forkserver"``).

The trainer starts the fork server with SIGINT blocked, so that a Ctrl-C
while it imports its preload list (NumPy, ale-py: most of a second) does not
print a KeyboardInterrupt traceback from it. Importing this module makes the
server ignore SIGINT from then on, as multiprocessing's server does once its
preload is done, and unblocks it; the workers it forks inherit the ignore
and handle SIGINT themselves (:func:`shmatari.worker.worker_main`).
"""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
if hasattr(signal, "pthread_sigmask"):
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
