"""serving_image_versions.read_versions: the installed distributions' versions read with the image's python3 (fast),
the tools' own --version as the fallback, the extra mounts given to every throw-away container."""
import pytest

from ansible_collections.dgxspark.cluster.plugins.modules import serving_image_versions as siv


class FakeModule:
    """run_command answers from a table keyed by (entrypoint, first argument)."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def run_command(self, argv):
        self.calls.append(argv)
        entry = argv[argv.index('--entrypoint') + 1]
        key = (entry, argv[argv.index('--entrypoint') + 3])
        if entry == 'python3':
            key = ('python3', 'metadata')
        return self.answers.get(key, (127, '', 'exec: "%s": executable file not found in $PATH' % entry))


@pytest.mark.parametrize('answers,versions,errors,calls', [
    # the lab's image: the metadata of both in one container, no tool is started
    ({('python3', 'metadata'): (0, '{"vllm": "0.32.0+cpu", "ray": "2.60.0"}\n', '')},
     {'vllm': '0.32.0+cpu', 'ray': '2.60.0'}, [], 1),
    # a sitecustomize that prints before the answer: the last JSON line counts
    ({('python3', 'metadata'): (0, 'dgxspark: patch loaded\n{"vllm": "0.33.0", "ray": "2.60.0"}\n', '')},
     {'vllm': '0.33.0', 'ray': '2.60.0'}, [], 1),
    # an image without python3 on PATH: the tools' own --version
    ({('vllm', '--version'): (0, 'INFO 01-01 plugin loaded\n0.33.0\n', ''), ('ray', '--version'): (0, 'ray, version 2.60.0\n', '')},
     {'vllm': '0.33.0', 'ray': '2.60.0'}, [], 3),
    # vLLM installed without its metadata (a source checkout on PYTHONPATH): only vllm --version is started
    ({('python3', 'metadata'): (0, '{"vllm": "", "ray": "2.60.0"}\n', ''), ('vllm', '--version'): (0, '0.33.0\n', '')},
     {'vllm': '0.33.0', 'ray': '2.60.0'}, [], 2),
    # an NGC image without Ray: vLLM found, Ray's absence said
    ({('python3', 'metadata'): (0, '{"vllm": "0.33.0", "ray": ""}\n', '')},
     {'vllm': '0.33.0', 'ray': ''},
     ['ray --version in img exited 127: exec: "ray": executable file not found in $PATH'], 2),
])
def test_read_versions(answers, versions, errors, calls):
    module = FakeModule(answers)
    got, problems = siv.read_versions(module, 'docker', 'img', ['/opt/e:/opt/e:ro'])
    assert got == versions and problems == errors and len(module.calls) == calls
    for argv in module.calls:
        assert argv[:5] == ['docker', 'run', '--rm', '--network', 'none']
        assert argv[5:7] == ['--volume', '/opt/e:/opt/e:ro']


def test_the_metadata_script_runs_in_a_real_python():
    """The script given to the image's python3 runs as is and answers both names as this Python's metadata has them."""
    import importlib.metadata
    import subprocess
    import sys

    def installed(name):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return ''

    proc = subprocess.run([sys.executable, '-c', siv._METADATA], capture_output=True, text=True, check=True)
    assert siv.parse_metadata(proc.stdout) == {'vllm': installed('vllm'), 'ray': installed('ray')}
