"""dgxspark.cluster vllm_container: a headless vLLM rank (dgxspark_executor_backend mp) that ends when rank 0 is gone,
so that Docker starts it again.

    python3 dgxspark_rank_watch.py MASTER_ADDR MASTER_PORT -- vllm serve MODEL ... --headless

vLLM #32136: when rank 0 (the head's `vllm serve`) dies, a headless rank neither exits nor recovers, and a restarted
head then waits in init_process_group for a rank that never comes back: a half group, for ever. Rank 0's rendezvous (a
torch TCPStore on --master-port) listens for as long as rank 0 lives, so this watch runs vLLM as its child and connects
to that port every DGXSPARK_RANK_WATCH_S seconds (5): once it has answered, DGXSPARK_RANK_WATCH_MISSES failed connects
in a row (3: refused, timed out or unreachable) end the child (SIGTERM to its process group, SIGKILL after
DGXSPARK_RANK_WATCH_STOP_S, 10) and the watch exits 1 saying why. Before the first answer the head may still be starting:
nothing is counted. SIGTERM and SIGINT (docker stop) go to the child; the child's own exit is the watch's exit.
Measured on vLLM 0.32 (docs/design.md, "Executor backends"): the head killed, the group served again ~66 s later.
"""

import os
import signal
import socket
import subprocess
import sys
import time


def setting(name, default):
    value = os.environ.get(name, "")
    return float(value) if value else default


class Watch:
    """Whether rank 0's rendezvous still answers: ``gone`` once it answered and then failed ``misses`` times in a row."""

    def __init__(self, misses):
        self.misses = misses
        self.answered = False
        self.failed = 0

    def seen(self, answered):
        if answered:
            self.answered, self.failed = True, 0
        elif self.answered:
            self.failed += 1
        return self.gone

    @property
    def gone(self):
        return self.answered and self.failed >= self.misses


def answers(address, port, timeout):
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def exit_status(code):
    """A child's return code as a shell reports it: 128 + the signal that ended it."""
    return 128 - code if code < 0 else code


def stop(child, grace):
    """SIGTERM to the child's process group, SIGKILL after ``grace`` seconds. Returns its exit status."""
    for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:
            break
        try:
            return exit_status(child.wait(timeout=wait))
        except subprocess.TimeoutExpired:
            continue
    return exit_status(child.wait())


def main(argv):
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: dgxspark_rank_watch.py MASTER_ADDR MASTER_PORT -- COMMAND...\n")
        return 2
    address, port, command = argv[0], int(argv[1]), argv[3:]
    interval = setting("DGXSPARK_RANK_WATCH_S", 5.0)
    grace = setting("DGXSPARK_RANK_WATCH_STOP_S", 10.0)
    watch = Watch(int(setting("DGXSPARK_RANK_WATCH_MISSES", 3)))
    stopping = []

    def forward(signum, _frame):
        stopping.append(signum)

    # Before vLLM starts: a `docker stop` that comes while it starts must stop it, not end the watch alone.
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    child = subprocess.Popen(command, start_new_session=True)  # pylint: disable=consider-using-with
    while True:
        deadline = time.monotonic() + interval
        while time.monotonic() < deadline:
            if stopping:
                return stop(child, grace)
            code = child.poll()
            if code is not None:
                return exit_status(code)
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        if watch.seen(answers(address, port, timeout=min(interval, 5.0))):
            sys.stderr.write(
                "dgxspark_rank_watch: rank 0's rendezvous %s:%d failed %d connects in a row after it had answered: rank 0 "
                "is gone and this headless rank would wait for ever (vLLM #32136); ending it so that it starts again and "
                "joins the next rank 0\n" % (address, port, watch.failed))
            sys.stderr.flush()
            stop(child, grace)
            return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
