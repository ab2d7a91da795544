# dgxspark.cluster distribute: runs on a node; moves the model or the serving image along the chain of nodes.
#   model: the head sends one tar stream per rail (GNU tar over SSH) through every node that lacks something, in plan
#          order. Each node passes every block on to the next node as it reads it and keeps the files it lacks, hashing
#          each as it arrives and putting it in place (with the source's mtime) only when its size and sha256 match the
#          manifest. N nodes finish within a pipe buffer of one another: about the time of one copy, not N.
#   image: read `docker save` on stdin, pass the same bytes on to the next node, and load them into this node's Docker
#          once their image ID is the one the head sent (a spool file, removed after).
# Progress (bytes, total, status per lane) goes to a JSON file that the controller polls (dgxspark.cluster.distribute_wait).
import argparse
import fcntl
import hashlib
import json
import os
import re
import select
import shlex
import subprocess
import sys
import tarfile
import threading
import time

PARTIAL_DIR = '.dgxspark-partial'
CHUNK = 1024 * 1024


def write_progress(path, **fields):
    fields['updated'] = time.time()
    tmp = path + '.tmp'
    with open(tmp, 'w') as handle:
        json.dump(fields, handle)
    os.replace(tmp, path)


def ssh_command(args):
    return ['ssh', '-i', args.ssh_key, '-o', 'IdentitiesOnly=yes', '-o', 'BatchMode=yes',
            '-o', 'UserKnownHostsFile=' + args.known_hosts, '-o', 'StrictHostKeyChecking=yes',
            '-o', 'ConnectTimeout=10', '-o', 'ServerAliveInterval=5', '-o', 'ServerAliveCountMax=3',
            '-o', 'Compression=no', '-c', args.cipher, '-p', str(args.ssh_port)]


def remote_relay(args, kind, extra):
    """The command line (one string, for the remote shell) that starts this relay on the next node."""
    words = ['python3', os.path.abspath(__file__), kind] + extra
    for name in ('ssh_key', 'known_hosts', 'user', 'cipher', 'ssh_port'):
        words += ['--' + name.replace('_', '-'), str(getattr(args, name))]
    return ' '.join(shlex.quote(w) for w in words)


class LaneProgress(object):
    """This node's progress file, shared by its lanes (one relay process per rail): each lane updates its own part under a
    lock; the file's top level sums them (bytes, total) and is done when every lane is, failed when any lane failed."""

    def __init__(self, path, lane, lanes):
        self.path, self.lane, self.lanes, self.last = path, str(lane), lanes, 0.0

    def update(self, force=False, **fields):
        if not force and time.time() - self.last < 1:
            return
        self.last = time.time()
        with open(self.path + '.lock', 'a') as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with open(self.path) as handle:
                    state = json.load(handle)
            except (OSError, ValueError):
                state = {}
            lanes = state.get('lanes') or {}
            lanes[self.lane] = dict(lanes.get(self.lane) or {}, **fields)
            statuses = [lanes.get(str(i), {}).get('status', 'waiting') for i in range(self.lanes)]
            errors = [lane.get('error') for lane in lanes.values() if lane.get('error')]
            status = 'failed' if 'failed' in statuses else 'done' if all(s == 'done' for s in statuses) else 'running'
            write_progress(self.path, lanes=lanes, status=status, error=' | '.join(errors),
                           bytes=sum(int(lane.get('bytes', 0)) for lane in lanes.values()),
                           total=sum(int(lane.get('total', 0)) for lane in lanes.values()))


class Tee(object):
    """A readable stream that passes every block it reads on to the next node, and counts them.

    A next node that fails stops the forwarding, not this node's own copy: the next node's wait reports its failure."""

    def __init__(self, stream, forward, on_block):
        self.stream, self.forward, self.on_block = stream, forward, on_block
        self.count, self.forward_error = 0, None

    def read(self, size=CHUNK):
        block = self.stream.read(size)
        if block and self.forward is not None:
            try:
                self.forward.stdin.write(block)
            except (BrokenPipeError, OSError) as exc:
                self.forward_error = str(exc)
                self.forward = None
        self.count += len(block)
        self.on_block(self.count)
        return block

    def drain(self):
        while self.read(CHUNK):
            pass


RETRY_INTERVAL = 2


def connect_next(args, kind, extra):
    """(the next node's relay, reading from a pipe, or None; why it could not be reached, or '').

    The next node's rails may come up a little later than this one's (a node just restarted): connect again until its
    relay answers `ready` or `connect_wait` seconds have passed, before any byte of the stream is sent."""
    extra = extra + ['--connect-wait', str(args.connect_wait)]
    if args.chain[1:]:
        extra += ['--chain', ','.join(args.chain[1:])]
    command = ssh_command(args) + ['%s@%s' % (args.user, args.chain[0]), remote_relay(args, kind, extra)]
    deadline = time.time() + args.connect_wait
    while True:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        answered, _w, _x = select.select([proc.stdout], [], [], max(1.0, deadline - time.time()))
        if answered and proc.stdout.readline().strip() == b'ready':
            return proc, ''
        proc.kill()
        proc.wait()
        tail = proc.stderr.read().decode(errors='replace').strip().splitlines()[-1:]
        if time.time() >= deadline:
            return None, 'could not reach %s for %d s: %s' % (args.chain[0], args.connect_wait, ' '.join(tail) or 'no answer')
        time.sleep(RETRY_INTERVAL)


def say_ready():
    """Tell the node before this one that this relay runs (see connect_next)."""
    sys.stdout.buffer.write(b'ready\n')
    sys.stdout.buffer.flush()


def tar_argv(directory):
    """The head's GNU tar of one lane, its files' paths NUL-separated on stdin. Only files are sent (the manifest's copy
    step makes the links): a file that is a link out of the directory (a Hugging Face snapshot's, into the cache's
    blobs/) goes as the content it points to."""
    return ['tar', '-C', directory, '--dereference', '--null', '--files-from=-', '-cf', '-']


def start_forward(args, lane, lanes, upstream_here):
    """The next node's model relay for this lane (see connect_next)."""
    if not args.chain:
        return None, ''
    return connect_next(args, 'model-recv', [
        '--dir', args.dir, '--entries', args.entries, '--progress', args.progress, '--lane', str(lane),
        '--lanes', str(lanes), '--total', str(args.total), '--upstream', upstream_here, '--here', args.chain[0]])


def finish_forward(tee, forward, chain):
    """'' when the next node took the whole stream, else why not."""
    if forward is None:
        return ''
    try:
        forward.stdin.close()
    except (BrokenPipeError, OSError):
        pass
    code = forward.wait()
    if code == 0 and tee.forward_error is None:
        return ''
    tail = forward.stderr.read().decode(errors='replace').strip().splitlines()[-2:]
    return 'the copy to %s failed: %s' % (chain[0], ' | '.join(tail) or tee.forward_error or 'exit code %d' % code)


def receive_file(tar, member, root, entry):
    """Write one file of the stream, hashing it as it arrives; in place (manifest mtime) only when size and sha256 match."""
    partial = os.path.join(root, PARTIAL_DIR, entry['path'])
    os.makedirs(os.path.dirname(partial), mode=0o700, exist_ok=True)
    digest, size = hashlib.sha256(), 0
    source = tar.extractfile(member)
    with open(partial, 'wb') as out:
        for block in iter(lambda: source.read(CHUNK), b''):
            digest.update(block)
            out.write(block)
            size += len(block)
    if size != entry['size'] or digest.hexdigest() != entry['sha256']:
        os.unlink(partial)
        return '%s arrived with %d bytes and sha256 %s, the source has %d and %s' % (
            entry['path'], size, digest.hexdigest(), entry['size'], entry['sha256'])
    os.chmod(partial, 0o644)
    os.utime(partial, ns=(entry['mtime_ns'], entry['mtime_ns']))
    final = os.path.join(root, entry['path'])
    os.makedirs(os.path.dirname(final), mode=0o755, exist_ok=True)
    os.replace(partial, final)
    return ''


def send_model(args):
    """On the head: one tar stream per rail, each through the chain of nodes that lack something."""
    with open(args.files) as handle:
        files = json.load(handle)
    chains = [[node[rail] for node in args.chain] for rail in args.rail]
    lanes = [[] for _chain in chains]
    sizes = [0] * len(lanes)
    for entry in files:  # manifest order, each file to the lane with the fewest bytes so far
        lane = sizes.index(min(sizes))
        lanes[lane].append(entry['path'])
        sizes[lane] += entry['size']
    used = [i for i, paths in enumerate(lanes) if paths]
    errors = [None] * len(lanes)

    def run(index, order):
        upstream_here, chain = chains[index][0], chains[index][1:]
        lane_args = argparse.Namespace(**dict(vars(args), chain=chain, total=sizes[index]))
        progress = LaneProgress(args.progress, order, len(used))
        tar = subprocess.Popen(tar_argv(args.dir), stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        tar.stdin.write(b''.join(p.encode() + b'\0' for p in lanes[index]))
        tar.stdin.close()
        forward, unreachable = start_forward(lane_args, order, len(used), upstream_here)
        tee = Tee(tar.stdout, forward, lambda n: progress.update(bytes=min(n, sizes[index]), total=sizes[index], status='running'))
        tee.drain()
        code = tar.wait()
        error = unreachable or finish_forward(tee, forward, chain)
        if code:
            error = 'tar on the head failed: %s' % tar.stderr.read().decode(errors='replace').strip()
        errors[index] = error
        progress.update(force=True, bytes=sizes[index], total=sizes[index], status='failed' if error else 'done', error=error)

    threads = [threading.Thread(target=run, args=(index, order)) for order, index in enumerate(used)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failed = [e for e in errors if e]
    if failed:
        sys.stderr.write(' | '.join(failed) + '\n')
    return 1 if failed else 0


def enter_partial_dir(root):
    """Hold the model directory shared while this lane writes: the node's other lanes write in the same partial dir."""
    os.makedirs(root, mode=0o755, exist_ok=True)
    lock = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(lock, fcntl.LOCK_SH)
    return lock


def leave_partial_dir(root, lock):
    """The last lane of the node to finish removes the partial dir's empty folders; a lane still writing keeps them.

    Without the lock a lane that ended removed the folder that another lane had just made for its next file (ENOENT).
    """
    fcntl.flock(lock, fcntl.LOCK_UN)  # unlock first: a lane that ends after this one then finds no other holder
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        return
    try:
        for dirpath, _dirs, _files in os.walk(os.path.join(root, PARTIAL_DIR), topdown=False):
            try:
                os.rmdir(dirpath)  # only empty ones: a file that failed its check was removed already
            except OSError:
                pass
    finally:
        os.close(lock)


def receive_model(args):
    """On a node of the chain: pass the stream on, and keep (hashed, verified) the files this node lacks."""
    with open(args.entries) as handle:
        wanted = dict((e['path'], e) for e in json.load(handle) if 'sha256' in e)
    progress = LaneProgress(args.progress, args.lane, args.lanes)
    progress.update(force=True, bytes=0, total=args.total, status='running')
    lane_lock = enter_partial_dir(args.dir)
    say_ready()
    forward, unreachable = start_forward(args, args.lane, args.lanes, args.here)
    tee = Tee(sys.stdin.buffer, forward, lambda n: progress.update(bytes=min(n, args.total), total=args.total, status='running'))
    problems, seen, broken = [], 0, False
    try:
        with tarfile.open(fileobj=tee, mode='r|', bufsize=CHUNK) as tar:
            for member in tar:
                seen += 1
                entry = wanted.get(member.name)
                if entry is not None and member.isfile():
                    try:
                        problem = receive_file(tar, member, args.dir, entry)
                    except OSError as exc:  # this node's disk; the stream goes on to the next node
                        problem = '%s could not be written: %s' % (entry['path'], exc)
                    if problem:
                        problems.append(problem)
        tee.drain()
    except (tarfile.TarError, EOFError, OSError) as exc:
        broken = True
        problems.append('the stream from %s ended early (%s): the node before this one or its link failed' % (args.upstream, exc))
    if seen == 0 and not problems:
        broken = True
        problems.append('no data from %s: the node before this one or its link failed' % args.upstream)
    forward_error = unreachable or finish_forward(tee, forward, args.chain)
    leave_partial_dir(args.dir, lane_lock)
    # This node's own verdict and the next hop's, each in this node's progress file. The exit code says only whether
    # this node took the whole stream, so that a failure further down is not reported again by every node before it.
    error = ' | '.join(problems + ([forward_error] if forward_error else []))
    progress.update(force=True, bytes=args.total if not problems else min(tee.count, args.total), total=args.total,
                    status='failed' if error else 'done', error=error)
    if error:
        sys.stderr.write(error + '\n')
    return 1 if broken else 0


IMAGE_SPOOL_DIR = '/var/lib/dgxspark/distribute'
IMAGE_ID_RE = re.compile(r'^sha256:[0-9a-f]{64}$')


def image_ids_in(tar_path):
    """The IDs a `docker save` archive can be known by: the sha256 of each image config that manifest.json names (the
    image ID of Docker's own image store) and, in an OCI layout, the manifests index.json names and index.json's own
    digest (the ID under the containerd image store)."""
    ids = set()
    with tarfile.open(tar_path) as tar:
        def digest_of(name):
            member = tar.extractfile(name)
            sha = hashlib.sha256()
            for block in iter(lambda: member.read(CHUNK), b''):
                sha.update(block)
            return 'sha256:' + sha.hexdigest()
        names = set(tar.getnames())
        if 'manifest.json' in names:
            for entry in json.load(tar.extractfile('manifest.json')):
                ids.add(digest_of(entry['Config']))
        if 'index.json' in names:
            ids.add(digest_of('index.json'))
            ids.update(m['digest'] for m in json.load(tar.extractfile('index.json')).get('manifests', []))
    return ids


def load_verified(path, image_id):
    """`docker load` the archive at path only when it is the image image_id; '' or why not."""
    try:
        ids = image_ids_in(path)
    except (tarfile.TarError, OSError, ValueError, KeyError) as exc:
        return 'the image received is not a docker save archive (%s): not loaded' % exc
    if image_id not in ids:
        return 'the image received is not %s (it is %s): not loaded' % (image_id, ', '.join(sorted(ids)) or 'unnamed')
    load = subprocess.run(['docker', 'load', '--quiet', '--input', path], capture_output=True, text=True, check=False)
    if load.returncode != 0:
        return 'docker load failed: %s' % (load.stderr or load.stdout).strip()[-300:]
    return ''


def relay_image(args):
    """stdin (a `docker save` stream) -> a spool file on this node (unless --source), loaded into Docker only once its
    ID is the one the head sent (--image-id), and the next node's relay as the bytes arrive."""
    outputs, spool, spool_path = [], None, ''
    if args.source:
        save = subprocess.Popen(['docker', 'save', args.source], stdout=subprocess.PIPE)
        stream = save.stdout
    else:
        save, stream = None, sys.stdin.buffer
        os.makedirs(IMAGE_SPOOL_DIR, mode=0o700, exist_ok=True)
        spool_path = os.path.join(IMAGE_SPOOL_DIR, 'image.tar')
        spool = open(spool_path, 'wb')  # pylint: disable=consider-using-with  # closed below, removed in the end
    forward, unreachable = None, ''
    write_progress(args.progress, bytes=0, total=args.total, status='running')
    if not args.source:
        say_ready()
    if args.chain:
        forward, unreachable = connect_next(args, 'image', ['--progress', args.progress, '--total', str(args.total),
                                                            '--image-id', args.image_id])
        if forward is None:
            for proc in outputs:
                proc.kill()
            if save is not None:
                save.kill()
            write_progress(args.progress, bytes=0, total=args.total, status='failed', error=unreachable)
            sys.stderr.write(unreachable + '\n')
            return 1
        outputs.append(forward)
    moved, last = 0, 0.0
    broken = False
    while not broken:
        block = stream.read(CHUNK)
        if not block:
            break
        if spool is not None:
            spool.write(block)
        for proc in outputs:
            try:
                proc.stdin.write(block)
            except BrokenPipeError:
                broken = True
        moved += len(block)
        if time.time() - last > 1:
            write_progress(args.progress, bytes=moved, total=args.total, status='running')
            last = time.time()
    codes = []
    for proc in outputs:
        try:
            proc.stdin.close()
        except BrokenPipeError:
            pass
    for proc in outputs:
        codes.append(proc.wait())
    if save is not None:
        if broken:
            save.kill()
        codes.append(save.wait())
    ok = not any(codes) and not broken
    error = ''
    if spool is not None:
        spool.close()
        if ok:
            error = load_verified(spool_path, args.image_id)
            ok = not error
        os.unlink(spool_path)
    if not ok and not error:
        error = 'docker save/load or the next node failed (exit codes %s)' % codes
        if forward is not None:
            tail = forward.stderr.read().decode(errors='replace').strip().splitlines()[-3:]
            if forward.returncode:
                error = 'the copy to %s failed: %s' % (args.chain[0], ' | '.join(tail) or 'exit code %d' % forward.returncode)
    elif forward is not None:
        sys.stderr.write(forward.stderr.read().decode(errors='replace'))
    write_progress(args.progress, bytes=moved, total=args.total, status='done' if ok else 'failed', error=error)
    if error:
        sys.stderr.write(error + '\n')
    return 0 if ok else 1


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest='kind', required=True)
    for kind in ('model-send', 'model-recv', 'image'):
        p = sub.add_parser(kind)
        p.add_argument('--progress', required=True)
        p.add_argument('--ssh-key', required=True)
        p.add_argument('--known-hosts', required=True)
        p.add_argument('--user', default='root')
        p.add_argument('--ssh-port', type=int, default=22)
        p.add_argument('--cipher', default='aes128-gcm@openssh.com')
    for kind in ('model-send', 'model-recv'):
        p = sub.choices[kind]
        p.add_argument('--dir', required=True)
    p = sub.choices['model-send']
    p.add_argument('--files', required=True, help='JSON list of {path, size}: what any node lacks, in manifest order')
    p.add_argument('--chain', type=json.loads, required=True,
                   help='JSON list of {rail: address}: the head, then every receiving node, in plan order')
    p.add_argument('--rail', action='append', required=True, help='the rails, one stream each')
    p.add_argument('--entries', required=True, help='the path of each receiving node\'s list of the files it lacks')
    p = sub.choices['model-recv']
    p.add_argument('--entries', required=True, help='JSON list of {path, size, mtime_ns, sha256}: the files this node lacks')
    p.add_argument('--lane', type=int, required=True)
    p.add_argument('--lanes', type=int, required=True)
    p.add_argument('--total', type=int, required=True)
    p.add_argument('--upstream', required=True, help='the address this node reads from (for messages)')
    p.add_argument('--here', required=True, help='this node\'s address on the lane\'s rail')
    p.add_argument('--chain', type=lambda v: [a for a in v.split(',') if a], default=[])
    for kind in ('model-send', 'model-recv', 'image'):
        sub.choices[kind].add_argument('--connect-wait', type=int, default=60,
                                       help='seconds to keep trying to reach the next node before the stream starts')
    p = sub.choices['image']
    p.add_argument('--source', help='the image to `docker save` (first node of the chain only)')
    p.add_argument('--chain', type=lambda v: [a for a in v.split(',') if a], default=[])
    p.add_argument('--total', type=int, default=0)
    p.add_argument('--image-id', required=True, help='the ID (sha256:...) a node checks before it loads what it got')
    return parser


class ForcedCommandError(ValueError):
    """A request over the distribution key that is not one of the relay's own receiving operations."""


class _Refusing(argparse.ArgumentParser):
    def error(self, message):
        raise ForcedCommandError(message)


def forced_request(original, fixed):
    """The relay's arguments for SSH_ORIGINAL_COMMAND when it is what remote_relay() sends to a receiving node, with
    the paths this node fixed (``fixed``: relay, ssh_key, known_hosts, user, progress {kind: path}, entries,
    model_dirs, rail_nets, image_id: the head's image, the only one it loads); else
    ForcedCommandError naming what is refused. Nothing of the request reaches a shell."""
    import ipaddress  # pylint: disable=import-outside-toplevel
    try:
        words = shlex.split(original or '')
    except ValueError as exc:
        raise ForcedCommandError('unreadable request: %s' % exc) from None
    if len(words) < 3 or words[0] not in ('python3', '/usr/bin/python3') or words[1] != fixed['relay']:
        raise ForcedCommandError('only the relay %s runs with this key, not %r' % (fixed['relay'], ' '.join(words[:2])))
    if words[2] not in ('model-recv', 'image'):
        raise ForcedCommandError('only model-recv and image run with this key, not %r' % words[2])
    parser = build_parser()
    for sub in parser._subparsers._group_actions[0].choices.values():  # pylint: disable=protected-access
        sub.__class__ = _Refusing
    parser.__class__ = _Refusing
    args = parser.parse_args(words[2:])
    wanted = {'ssh_key': fixed['ssh_key'], 'known_hosts': fixed['known_hosts'], 'user': fixed['user'],
              'progress': fixed['progress'][args.kind]}
    if args.kind == 'model-recv':
        wanted['entries'] = fixed['entries']
    for name, value in wanted.items():
        if str(getattr(args, name)) != str(value):
            raise ForcedCommandError('--%s must be %s, not %s' % (name.replace('_', '-'), value, getattr(args, name)))
    if args.kind == 'model-recv' and args.dir not in fixed['model_dirs']:
        raise ForcedCommandError('--dir must be one of %s, not %s' % (', '.join(fixed['model_dirs']), args.dir))
    if args.kind == 'image' and args.source:
        raise ForcedCommandError('--source (docker save) runs only where the chain starts, never over this key')
    if args.kind == 'image' and not IMAGE_ID_RE.match(args.image_id):
        raise ForcedCommandError('--image-id must be sha256: and 64 hex digits, not %r' % args.image_id)
    # The ID the controller read on the head, not one the sender names: a node that sends cannot load another image
    # (a re-tagged vllm/vllm-openai, a release's) into this node's Docker.
    if args.kind == 'image' and args.image_id != fixed.get('image_id'):
        raise ForcedCommandError('only the head\'s image %s may be loaded with this key, not %s'
                                 % (fixed.get('image_id') or '(none: no image is being distributed)', args.image_id))
    nets = [ipaddress.ip_network(net) for net in fixed['rail_nets']]
    addresses = list(args.chain) + ([args.upstream, args.here] if args.kind == 'model-recv' else [])
    for address in addresses:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            raise ForcedCommandError('%r is not an address on the rails' % address) from None
        if not any(ip in net for net in nets):
            raise ForcedCommandError('%s is not on the rails (%s)' % (address, ', '.join(fixed['rail_nets'])))
    return words[2:]


def forced_main(config_path):
    """The authorized_keys command of the distribution key: run the request only if forced_request accepts it."""
    try:
        with open(config_path) as handle:
            fixed = json.load(handle)
        argv = forced_request(os.environ.get('SSH_ORIGINAL_COMMAND', ''), fixed)
    except (ForcedCommandError, OSError, ValueError, KeyError) as exc:
        sys.stderr.write('distribute_relay (forced command): refused: %s\n' % exc)
        return 2
    return main(argv)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ['--forced']:
        return forced_main(argv[1])
    args = build_parser().parse_args(argv)
    return {'model-send': send_model, 'model-recv': receive_model, 'image': relay_image}[args.kind](args)


if __name__ == '__main__':
    sys.exit(main())
