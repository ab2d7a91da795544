"""What the lab's tests and benchmarks ask of the network from the controller, in one place (stdlib only: the lab
tests import it through tests/lab/conftest.py, the benchmarks through their own sys.path line)."""

import socket


def answers(address, port, timeout=2.0):
    """True when a TCP connection from here to address:port is accepted (refused, dropped or timed out: False)."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def sigterm_ignoring_server(port):
    """Python source of a TCP server on `port` that ignores SIGTERM: a serving container at its worst for Docker's stop
    (run with `python3 -c`), which only SIGKILL ends."""
    return ("import signal, socket\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nserver = socket.create_server(('', %d))\n"
            "while True:\n    server.accept()[0].close()\n" % port)
