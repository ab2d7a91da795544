"""The per-GPU rank actor of the LAB STAND-IN (what RayWorkerProc is in vLLM).

It runs in a Ray worker process on the node Ray placed its bundle on, so os.environ here
is that node's environment (the container's, as `ray start` saw it), before and after the
driver's variables are applied."""
import fcntl
import os
import socket
import struct
import threading
import time

from . import envcarry, safetensors_io

REPORTED_PREFIXES = ("NCCL_", "GLOO_", "UCX_", "TP_SOCKET_", "OMPI_MCA_btl_tcp")
SIOCGIFADDR = 0x8915


def interface_ipv4(ifname):
    """First IPv4 address of an interface (SIOCGIFADDR), or None."""
    if not ifname:
        return None
    name = ifname.lstrip("=^").split(",")[0].strip()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        packed = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
        return socket.inet_ntoa(packed[20:24])
    except OSError:
        return None
    finally:
        sock.close()


def _node_ip():
    try:
        import ray
        return ray.util.get_node_ip_address()
    except ImportError:  # local world (backend uni/mp): no Ray in this process
        return "127.0.0.1"


class RankWorker:
    def __init__(self, rank, world_size):
        self.rank, self.world_size = rank, world_size
        self.node_env_before = dict(os.environ)
        self.listener = None
        self.changes = []

    # -- identity and environment -----------------------------------------------------
    def describe(self):
        import ray
        ctx = ray.get_runtime_context()
        try:
            gpu_ids = [str(g) for g in ray.get_gpu_ids()]
        except Exception:  # pylint: disable=broad-except
            gpu_ids = []
        return {"rank": self.rank, "hostname": socket.gethostname(), "pid": os.getpid(),
                "node_id": ctx.get_node_id(), "ray_node_ip": ray.util.get_node_ip_address(),
                "gpu_ids": gpu_ids}

    def init_env(self, sent, mode):
        self.changes = envcarry.apply_on_worker(os.environ, sent, mode)
        fabric_ip = os.environ.get("VLLM_HOST_IP") or None
        gloo_if = os.environ.get("GLOO_SOCKET_IFNAME") or None
        return {
            "rank": self.rank,
            "vllm_host_ip": fabric_ip,
            "vllm_host_ip_from_node": self.node_env_before.get("VLLM_HOST_IP"),
            "gloo_socket_ifname": gloo_if,
            "bootstrap_ip": interface_ipv4(gloo_if),
            "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(REPORTED_PREFIXES)},
            "overwritten_or_filled": [{"name": n, "node_value": b, "now": a} for n, b, a in self.changes
                                      if n.startswith(REPORTED_PREFIXES) or n.startswith("VLLM_")],
        }

    # -- transport check -------------------------------------------------------------
    def open_listener(self):
        """Listen on the bootstrap interface's address (GLOO_SOCKET_IFNAME), else VLLM_HOST_IP, else Ray's node IP."""
        gloo_ip = interface_ipv4(os.environ.get("GLOO_SOCKET_IFNAME"))
        bind_ip = gloo_ip or os.environ.get("VLLM_HOST_IP") or _node_ip()
        source = "GLOO_SOCKET_IFNAME" if gloo_ip else ("VLLM_HOST_IP" if os.environ.get("VLLM_HOST_IP") else "ray node ip")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bind_ip, 0))
        sock.listen(8)
        self.listener = sock
        threading.Thread(target=self._serve, daemon=True).start()
        return {"rank": self.rank, "ip": bind_ip, "port": sock.getsockname()[1], "source": source}

    def _serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    data = conn.recv(64)
                    conn.sendall(b"ack rank %d " % self.rank + data)
                except OSError:
                    pass

    def check_neighbour(self, peer_rank, ip, port, timeout=5.0):
        own = self.listener.getsockname()[0] if self.listener else None
        start = time.monotonic()
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            if own and own != "0.0.0.0":
                sock.bind((own, 0))
            sock.connect((ip, port))
            sock.sendall(b"hello from rank %d" % self.rank)
            reply = sock.recv(128).decode(errors="replace")
            sock.close()
            ok = reply.startswith("ack rank %d" % peer_rank)
            return {"from_rank": self.rank, "to_rank": peer_rank, "from_ip": own, "to": "%s:%d" % (ip, port),
                    "ok": ok, "rtt_ms": round((time.monotonic() - start) * 1000, 3),
                    "error": None if ok else "unexpected reply %r" % reply}
        except OSError as err:
            return {"from_rank": self.rank, "to_rank": peer_rank, "from_ip": own, "to": "%s:%d" % (ip, port),
                    "ok": False, "rtt_ms": None, "error": "%s: %s" % (type(err).__name__, err)}

    # -- weights -------------------------------------------------------------------
    def load_shard(self, path, hang=False):
        if hang:
            # DGXSPARK_LAB_HANG_AT_SHARD: stand in for the loading deadlock of seed 004 (threads in
            # futex_wait, no error, no output). Only a watchdog on log progress notices.
            threading.Event().wait()
        info = safetensors_io.read_header(path)
        read = safetensors_io.read_data(path, info)
        return {"rank": self.rank, "path": path, "tensors": len(info["tensors"]), "bytes": read}

    def shutdown(self):
        if self.listener:
            self.listener.close()
        return True
