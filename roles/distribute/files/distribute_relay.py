# dgxspark.cluster distribute: runs on a node; moves the model or the serving image along the chain of nodes.
#   model: pull the files this node lacks from the node before it in the chain, over every rail at once, with rsync
#          over SSH, again and again until it has them all. Each pass takes only files that are complete upstream
#          (rsync writes under a temporary name and renames), so a node forwards a file as soon as it has it, while
#          it still receives the next: N nodes finish about one file's time after the first, not N copies later.
#   image: read `docker save` on stdin, load it into this node's Docker and pass the same bytes on to the next node.
# Progress (bytes, total, status) goes to a JSON file that the controller polls (dgxspark.cluster.distribute_wait).
import argparse
import json
import os
import subprocess
import sys
import tempfile
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


def dir_bytes(root):
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def have(root, entry):
    full = os.path.join(root, entry['path'])
    if 'target' in entry:
        return os.path.islink(full) and os.readlink(full) == entry['target']
    try:
        return os.lstat(full).st_size == entry['size']
    except OSError:
        return False


def rsync_pass(args, upstream, entries):
    """One rsync run for `entries` from `upstream`; returns (exit code, stderr tail)."""
    with tempfile.NamedTemporaryFile('w', delete=False, prefix='dgxspark-files-') as listing:
        listing.write(''.join(e['path'] + '\n' for e in entries))
    try:
        command = ['rsync', '-a', '--partial-dir=' + PARTIAL_DIR, '--ignore-missing-args', '--files-from=' + listing.name,
                   '-e', ' '.join(ssh_command(args)), '%s@%s:%s/' % (args.user, upstream, args.dir), args.dir + '/']
        proc = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, universal_newlines=True, check=False)
        return proc.returncode, proc.stderr.strip().splitlines()[-3:]
    finally:
        os.unlink(listing.name)


def relay_model(args):
    with open(args.entries) as handle:
        entries = json.load(handle)
    os.makedirs(args.dir, exist_ok=True)
    lanes = [entries[i::len(args.upstream)] for i in range(len(args.upstream))]
    start_bytes = dir_bytes(args.dir)
    needed = args.bytes_needed
    last_bytes, last_progress, last_error = start_bytes, time.time(), []
    write_progress(args.progress, bytes=0, total=needed, status='running')
    while True:
        todo = [[e for e in lane if not have(args.dir, e)] for lane in lanes]
        if not any(todo):
            break
        results = [None] * len(todo)

        def run(index, lane_todo):
            results[index] = rsync_pass(args, args.upstream[index], lane_todo) if lane_todo else (0, [])

        threads = [threading.Thread(target=run, args=(i, lane)) for i, lane in enumerate(todo)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for code, tail in results:
            if code not in (0, 23, 24):
                last_error = tail or ['rsync exited with %d' % code]
        now_bytes = dir_bytes(args.dir)
        write_progress(args.progress, bytes=max(0, now_bytes - start_bytes), total=needed, status='running')
        if now_bytes != last_bytes:
            last_bytes, last_progress = now_bytes, time.time()
        elif time.time() - last_progress > args.stall_timeout:
            message = 'no data from %s for %d s' % (' and '.join(args.upstream), args.stall_timeout)
            if last_error:
                message += ': ' + ' | '.join(last_error)
            write_progress(args.progress, bytes=max(0, now_bytes - start_bytes), total=needed, status='failed', error=message)
            sys.stderr.write(message + '\n')
            return 1
        else:
            time.sleep(args.pass_pause)
    write_progress(args.progress, bytes=needed, total=needed, status='done')
    return 0


def relay_image(args):
    """stdin (a `docker save` stream) -> this node's `docker load` (unless --source) and the next node's relay."""
    outputs = []
    if args.source:
        save = subprocess.Popen(['docker', 'save', args.source], stdout=subprocess.PIPE)
        stream = save.stdout
    else:
        save, stream = None, sys.stdin.buffer
        load = subprocess.Popen(['docker', 'load', '--quiet'], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        outputs.append(load)
    forward = None
    if args.chain:
        here = os.path.abspath(__file__)
        remote = ['python3', here, 'image', '--progress', args.progress, '--total', str(args.total)]
        for name in ('ssh_key', 'known_hosts', 'user', 'cipher', 'ssh_port'):
            remote += ['--' + name.replace('_', '-'), str(getattr(args, name))]
        if args.chain[1:]:
            remote += ['--chain', ','.join(args.chain[1:])]
        forward = subprocess.Popen(ssh_command(args) + ['%s@%s' % (args.user, args.chain[0])] + remote, stdin=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        outputs.append(forward)
    moved, last = 0, 0.0
    write_progress(args.progress, bytes=0, total=args.total, status='running')
    broken = False
    while not broken:
        block = stream.read(CHUNK)
        if not block:
            break
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
    if not ok:
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest='kind', required=True)
    for kind in ('model', 'image'):
        p = sub.add_parser(kind)
        p.add_argument('--progress', required=True)
        p.add_argument('--ssh-key', required=True)
        p.add_argument('--known-hosts', required=True)
        p.add_argument('--user', default='root')
        p.add_argument('--ssh-port', type=int, default=22)
        p.add_argument('--cipher', default='aes128-gcm@openssh.com')
    p = sub.choices['model']
    p.add_argument('--dir', required=True)
    p.add_argument('--entries', required=True, help='JSON list of {path, size} or {path, target}, in manifest order')
    p.add_argument('--upstream', action='append', required=True, help='the previous node, one address per rail')
    p.add_argument('--bytes-needed', type=int, required=True)
    p.add_argument('--stall-timeout', type=int, default=120)
    p.add_argument('--pass-pause', type=float, default=1.0)
    p = sub.choices['image']
    p.add_argument('--source', help='the image to `docker save` (first node of the chain only)')
    p.add_argument('--chain', type=lambda v: [a for a in v.split(',') if a], default=[])
    p.add_argument('--total', type=int, default=0)
    args = parser.parse_args(argv)
    return relay_model(args) if args.kind == 'model' else relay_image(args)


if __name__ == '__main__':
    sys.exit(main())
