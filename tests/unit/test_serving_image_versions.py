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
            key = ('python3', 'vllm' if "'vllm'" in argv[-1] else 'ray')
        return self.answers.get(key, (127, '', 'exec: "%s": executable file not found in $PATH' % entry))


@pytest.mark.parametrize('answers,versions,errors,calls', [
    # the lab's image: metadata answers for both, no tool is started
    ({('python3', 'vllm'): (0, '0.32.0+cpu\n', ''), ('python3', 'ray'): (0, '2.60.0\n', '')},
     {'vllm': '0.32.0+cpu', 'ray': '2.60.0'}, [], 2),
    # an image whose python3 lacks the metadata (or has no python3): the tools' own --version
    ({('vllm', '--version'): (0, 'INFO 01-01 plugin loaded\n0.33.0\n', ''), ('ray', '--version'): (0, 'ray, version 2.60.0\n', '')},
     {'vllm': '0.33.0', 'ray': '2.60.0'}, [], 4),
    # an NGC image without Ray: vLLM found, Ray's absence said
    ({('python3', 'vllm'): (0, '0.33.0\n', ''), ('python3', 'ray'): (1, '', 'PackageNotFoundError: ray')},
     {'vllm': '0.33.0', 'ray': ''},
     ['ray --version in img exited 127: exec: "ray": executable file not found in $PATH'], 3),
])
def test_read_versions(answers, versions, errors, calls):
    module = FakeModule(answers)
    got, problems = siv.read_versions(module, 'docker', 'img', ['/opt/e:/opt/e:ro'])
    assert got == versions and problems == errors and len(module.calls) == calls
    for argv in module.calls:
        assert argv[:5] == ['docker', 'run', '--rm', '--network', 'none']
        assert argv[5:7] == ['--volume', '/opt/e:/opt/e:ro']
