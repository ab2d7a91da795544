# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The API key on every route of vLLM's server, given to `vllm serve` as `--middleware
dgxspark_api_guard.KeyOnEveryRoute` by dgxspark.cluster's vllm_container role.

vLLM checks VLLM_API_KEY only on paths under /v1: `POST /invocations` (a whole chat completion), `/tokenize`,
`/detokenize`, `/metrics`, `/pooling`, `/score`, `/rerank` and the rest answer without it (vllm-project/vllm#58144).
This pure ASGI middleware (no import beyond the standard library, so it works with any vLLM that has `--middleware`)
answers 401 on every path, /v1 included, but the open ones (DGXSPARK_API_OPEN_PATHS, a JSON list; default ["/health"],
what load balancers and our readiness probe read) unless the request carries `Authorization: Bearer <key>`.
It reads the key from the descriptor DGXSPARK_API_KEY_FD or the file DGXSPARK_API_KEY_FILE names, and vLLM is given
none: an environment variable would show in /proc/PID/environ to every process of its PID namespace (the Ray
container's, which the head's vLLM container joins), and this process becomes non-dumpable, so that its memory and
/proc files need CAP_SYS_PTRACE.
A CORS preflight (OPTIONS with Origin and Access-Control-Request-Method) without the key reaches vLLM's CORS middleware,
but only the answer's status and headers come back: prometheus_client's /metrics answers every method with the metrics.
Without a key it refuses to start: a guard that lets everything through must not look like one.

On the head vllm-serve.sh starts vLLM through this file (`python3 dgxspark_api_guard.py VLLM_SCRIPT ARGS...`): it makes
the process non-dumpable, takes the key from the descriptor the script opened (DGXSPARK_API_KEY_FD), keeps only its
sha256 and closes the descriptor, drops the script's two capabilities, then runs vLLM in the same process. Until it is
non-dumpable those capabilities keep it out of reach (ptrace needs the target's permitted set within the tracer's).
vLLM forks its engine core (and mp's workers, where a model's remote code runs) before it loads the middleware: a
descriptor still open then would be theirs for good.
Non-dumpable before vLLM starts, so that every process of vLLM is: /proc/PID/root of any of them would otherwise open the
container's files (the TLS key among them) to root in the Ray container, which shares their PID namespace. A forked child
inherits the flag; an exec resets it, so a child that multiprocessing spawns (vLLM spawns its engine core where CUDA is
initialized or on CPU, and its resource tracker) runs hide_this_process() before anything else (_hidden_command).
That child is non-dumpable from its exec already where vllm-serve.sh made the interpreter unreadable (the kernel's rule
for a file its process cannot read); the call covers an interpreter that could not be.
"""

import ctypes
import ctypes.util
import hashlib
import hmac
import json
import os
import runpy
import sys

OPEN_PATHS_ENV = 'DGXSPARK_API_OPEN_PATHS'
# The mounted 0600 file of the key: the guard reads it itself, so that the key is in no process's environment (vLLM's
# own VLLM_API_KEY check is not used: this guard covers /v1 too).
KEY_FILE_ENV = 'DGXSPARK_API_KEY_FILE'
# The descriptor vllm-serve.sh opened the file on (the file itself needs CAP_DAC_READ_SEARCH, which vLLM does not have):
# read once, then closed, before vLLM starts (take_key_from_fd).
KEY_FD_ENV = 'DGXSPARK_API_KEY_FD'
# A key file longer than this is not a key.
KEY_MAX_BYTES = 4096
# The sha256 of the key taken from the descriptor before vLLM started: what the middleware compares with.
_TAKEN = {}
PR_SET_DUMPABLE = 4
PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
# The start script's two capabilities on the head: CAP_DAC_READ_SEARCH opened the key's 0000 file, CAP_SETPCAP lets the
# guard drop both from the bounding set (drop_key_capabilities).
CAP_DAC_READ_SEARCH = 2
CAP_SETPCAP = 8
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
DEFAULT_OPEN_PATHS = ('/health',)
UNAUTHORIZED = json.dumps({'error': 'Unauthorized'}).encode()


def _digest(key):
    """Compared as the bytes the client sent (a key of any characters, as UTF-8), in constant time."""
    return hashlib.sha256(key).digest()


def _digest_of_fd(number):
    """The sha256 of the key on descriptor ``number``, which is closed whatever happens. The key goes into one buffer,
    zeroed once hashed: no copy of it stays in this process's memory, which the engine core's fork inherits."""
    buffer = bytearray(KEY_MAX_BYTES + 1)
    try:
        fd = int(number)
        try:
            size = 0
            while size < len(buffer):
                read = os.readv(fd, [memoryview(buffer)[size:]])
                if not read:
                    break
                size += read
        finally:
            os.close(fd)
        if size > KEY_MAX_BYTES:
            raise ValueError('longer than %d bytes' % KEY_MAX_BYTES)
        while size and buffer[size - 1] in b'\r\n':
            size -= 1
        if not size:
            raise RuntimeError('dgxspark_api_guard: the API key is empty; refusing to serve without it')
        return _digest(memoryview(buffer)[:size])
    except (OSError, ValueError) as exc:
        raise RuntimeError('dgxspark_api_guard: the API key cannot be read from %s=%s (%s); refusing to serve without the '
                           'API key' % (KEY_FD_ENV, number, exc))
    finally:
        buffer[:] = bytes(len(buffer))


def take_key_from_fd(environ=None):
    """Before vLLM starts: the key's sha256 from the descriptor DGXSPARK_API_KEY_FD names, which is closed, and the
    variable removed, so that no process vLLM starts later (forked or not) holds the descriptor or looks for it."""
    environ = os.environ if environ is None else environ
    number = environ.pop(KEY_FD_ENV, None)
    if number:
        _TAKEN['digest'] = _digest_of_fd(number)


def _read_key(path):
    if not path:
        raise RuntimeError('dgxspark_api_guard: %s is not set; refusing to serve without the API key' % KEY_FILE_ENV)
    try:
        with open(path, 'rb') as handle:
            return handle.read().rstrip(b'\r\n')
    except OSError as exc:
        raise RuntimeError('dgxspark_api_guard: the API key file %s cannot be read (%s); refusing to serve without the '
                           'API key' % (path, exc.strerror))


def _libc():
    return ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6', use_errno=True)


def _not_dumpable():
    """prctl(PR_SET_DUMPABLE, 0): this process's /proc/PID/environ, mem, root and fd need CAP_SYS_PTRACE from now on."""
    if _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise RuntimeError('dgxspark_api_guard: prctl(PR_SET_DUMPABLE, 0) failed: %s' % os.strerror(ctypes.get_errno()))


class _CapHeader(ctypes.Structure):
    _fields_ = [('version', ctypes.c_uint32), ('pid', ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [('effective', ctypes.c_uint32), ('permitted', ctypes.c_uint32), ('inheritable', ctypes.c_uint32)]


def drop_key_capabilities():
    """CAP_DAC_READ_SEARCH and CAP_SETPCAP gone for good from this process and all it starts: out of the bounding set
    (which needs CAP_SETPCAP, so first), then out of the effective, permitted and inheritable sets (an ambient one goes
    with its inheritable bit). Run once non-dumpable: a process that holds CAP_DAC_READ_SEARCH is out of reach of root
    without it (ptrace needs the target's permitted set within the tracer's), a dumpable one without it is not.
    A process that holds neither is left as it is."""
    libc = _libc()
    for cap in (CAP_DAC_READ_SEARCH, CAP_SETPCAP):
        if libc.prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1 and libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise RuntimeError('dgxspark_api_guard: capability %d cannot leave the bounding set: %s'
                               % (cap, os.strerror(ctypes.get_errno())))
    header, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    keep = ~((1 << CAP_DAC_READ_SEARCH) | (1 << CAP_SETPCAP)) & 0xffffffff
    if libc.capget(ctypes.byref(header), data) != 0:
        raise RuntimeError('dgxspark_api_guard: capget failed: %s' % os.strerror(ctypes.get_errno()))
    data[0].effective &= keep
    data[0].permitted &= keep
    data[0].inheritable &= keep
    if libc.capset(ctypes.byref(header), data) != 0:
        raise RuntimeError('dgxspark_api_guard: the capabilities that open the key cannot be dropped: %s'
                           % os.strerror(ctypes.get_errno()))


def hide_this_process():
    """This process non-dumpable, and the Python children multiprocessing spawns from it (which exec) made so too."""
    _not_dumpable()
    from multiprocessing import util  # pylint: disable=import-outside-toplevel
    if not getattr(util.spawnv_passfds, 'dgxspark_hidden', False):
        util.spawnv_passfds = _spawning_hidden(util.spawnv_passfds)


def _hidden_command(args):
    """A Python command line that multiprocessing starts (`python [flags] -c PROGRAM ...`: a spawned child, the resource
    tracker, the forkserver) with PROGRAM run after hide_this_process(); any other command unchanged. The child imports
    this file from PYTHONPATH, as vLLM does for --middleware: where it cannot, it does not start."""
    if '-c' not in args[1:-1]:
        return list(args)
    index = args.index('-c', 1) + 1
    return list(args[:index]) + ['import dgxspark_api_guard as g; g.hide_this_process(); del g\n' + args[index]] \
        + list(args[index + 1:])


def _spawning_hidden(spawnv_passfds):
    def spawnv_passfds_hidden(path, args, passfds):
        return spawnv_passfds(path, _hidden_command(args), passfds)
    spawnv_passfds_hidden.dgxspark_hidden = True
    return spawnv_passfds_hidden


def _is_cors_preflight(scope):
    if scope['type'] != 'http' or scope.get('method') != 'OPTIONS':
        return False
    names = set(name.lower() for name, unused_value in scope.get('headers') or ())
    return b'origin' in names and b'access-control-request-method' in names


def _headers_only(send):
    """A send that passes the response's status and headers (with no length) and an empty body, whatever the app sent."""
    state = {'ended': False}

    async def send_headers_only(message):
        if message['type'] == 'http.response.start':
            headers = [(name, value) for name, value in message.get('headers') or () if name.lower() != b'content-length']
            return await send(dict(message, headers=headers + [(b'content-length', b'0')]))
        if message['type'] == 'http.response.body':
            if not state['ended']:
                state['ended'] = True
                return await send({'type': 'http.response.body', 'body': b'', 'more_body': False})
            return None
        return await send(message)

    return send_headers_only


class KeyOnEveryRoute:
    """ASGI middleware: every HTTP request and websocket outside the open paths needs the bearer key."""

    def __init__(self, app, api_key=None, open_paths=None):
        self.app = app
        if api_key is None:
            take_key_from_fd()  # started without this file's main (a test, a hand-made run): the descriptor now
            self._key = _TAKEN.get('digest') or self._digest_of(_read_key(os.environ.get(KEY_FILE_ENV, '')))
            # None but root with CAP_SYS_PTRACE (no container of ours has it) may read this process's /proc files from
            # now on, the processes of its Ray container included, which share its PID namespace.
            _not_dumpable()
        else:
            self._key = self._digest_of(api_key.encode('utf-8') if isinstance(api_key, str) else bytes(api_key))
        if open_paths is None:
            open_paths = json.loads(os.environ.get(OPEN_PATHS_ENV) or json.dumps(DEFAULT_OPEN_PATHS))
        self.open_paths = frozenset(open_paths)

    @staticmethod
    def _digest_of(key):
        if not key:
            raise RuntimeError('dgxspark_api_guard: the API key is empty; refusing to serve without it')
        return _digest(key)

    def authorized(self, scope):
        for name, value in scope.get('headers') or ():
            if name.lower() == b'authorization':
                scheme, unused_space, token = bytes(value).partition(b' ')
                return scheme.lower() == b'bearer' and hmac.compare_digest(_digest(token.strip()), self._key)
        return False

    async def __call__(self, scope, receive, send):
        if scope['type'] not in ('http', 'websocket'):
            return await self.app(scope, receive, send)
        path = scope['path']
        root = scope.get('root_path', '')
        if root and path.startswith(root):
            path = path[len(root):]
        if path in self.open_paths or self.authorized(scope):
            return await self.app(scope, receive, send)
        if _is_cors_preflight(scope):
            # A browser asks without the key; vLLM's CORS middleware answers it. Only the answer's status and headers
            # get out: an app that ignores the method (prometheus_client's /metrics) must not hand its body around the key.
            return await self.app(scope, receive, _headers_only(send))
        if scope['type'] == 'websocket':
            return await send({'type': 'websocket.close', 'code': 1008})
        await send({'type': 'http.response.start', 'status': 401,
                    'headers': [(b'content-type', b'application/json'), (b'www-authenticate', b'Bearer'),
                                (b'content-length', str(len(UNAUTHORIZED)).encode())]})
        return await send({'type': 'http.response.body', 'body': UNAUTHORIZED})


def exec_hidden(argv):
    """PROGRAM ARGS... in this process, exec'd non-dumpable without the start script's two capabilities: the program
    starts non-dumpable where its file cannot be read (vllm-serve.sh made the interpreter and bash so), which holds only
    for a process that no capability lets read past a file's mode, hence the drop before the exec."""
    hide_this_process()
    drop_key_capabilities()
    os.execvp(argv[0], argv)


def main(argv):
    """python3 dgxspark_api_guard.py VLLM_SCRIPT ARGS...: the key from its descriptor first, then vLLM in this process.
    python3 dgxspark_api_guard.py --exec PROGRAM ARGS...: PROGRAM as exec_hidden() starts it (the profile's patches)."""
    if len(argv) < 2 or (argv[1] == '--exec' and len(argv) < 3):
        sys.stderr.write('usage: dgxspark_api_guard.py VLLM_SCRIPT ARGS... | --exec PROGRAM ARGS...\n')
        return 2
    if argv[1] == '--exec':
        exec_hidden(argv[2:])
    # vLLM imports the middleware as dgxspark_api_guard: the key goes there, not into this __main__.
    import dgxspark_api_guard  # pylint: disable=import-self
    # Non-dumpable first, while the start script's capabilities still keep this process out of others' reach; before
    # vLLM starts any process, so that every one of them is too (see the module's docstring). Then the key, then those
    # capabilities.
    dgxspark_api_guard.hide_this_process()
    dgxspark_api_guard.take_key_from_fd()
    dgxspark_api_guard.drop_key_capabilities()
    sys.argv = argv[1:]
    runpy.run_path(argv[1], run_name='__main__')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
