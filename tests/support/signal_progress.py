"""A training progress that sends this process a real signal after a given step (in
the tests package: test modules import it as tests.support.signal_progress)."""

from __future__ import annotations

import os
import signal


class SignalAtStep:
    """Progress that sends this process a real signal after a given step."""

    def __init__(self, step: int, signum: int = signal.SIGTERM):
        self.step, self.signum, self.done = step, signum, 0

    def start(self, epochs, steps_per_epoch):
        pass

    def advance(self, steps):
        self.done += steps
        if self.done == self.step:
            os.kill(os.getpid(), self.signum)

    def epoch_done(self, epoch, metrics):
        pass
