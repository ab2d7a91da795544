"""vLLM's weight-loading progress line (vllm/model_executor/model_loader/weight_utils.py _BAR_FORMAT,
rendered as tqdm renders it) for the LAB STAND-IN."""
import sys
import time

DESC = "Loading safetensors checkpoint shards"


def _clock(seconds):
    seconds = int(seconds)
    minutes, sec = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return "%d:%02d:%02d" % (hours, minutes, sec) if hours else "%02d:%02d" % (minutes, sec)


def format_line(done, total, elapsed, desc=DESC):
    pct = 100.0 * done / total if total else 100.0
    if done and elapsed > 0:
        rate = done / elapsed
        rate_fmt = "%5.2fit/s" % rate if rate >= 1 else "%5.2fs/it" % (1 / rate)
        remaining = _clock((total - done) / rate)
    else:
        rate_fmt, remaining = "?it/s", "?"
    return "%s: %3.0f%% Completed | %d/%d [%s<%s, %s]" % (desc, pct, done, total, _clock(elapsed), remaining, rate_fmt)


class Progress:
    def __init__(self, total, stream=None, clock=time.monotonic):
        self.total, self.done = total, 0
        self.stream = stream or sys.stderr
        self.clock = clock
        self.start = clock()
        self._emit()

    def _emit(self):
        self.stream.write(format_line(self.done, self.total, self.clock() - self.start) + "\n")
        self.stream.flush()

    def update(self, n=1):
        self.done += n
        self._emit()
