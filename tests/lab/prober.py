"""A client of the served lab cluster: one chat completion (1 token, with the API key) every INTERVAL seconds to the
head's API, the time of every answer kept. What a release change costs a client is read from those times (tests/lab and
bench/)."""

import json
import ssl
import threading
import time
import urllib.error
import urllib.request

from ansible_lab import api_ca_file, api_url

# bench/release measures downtime to half a second. The lab tests ask once a second (TEST_INTERVAL): each answer costs
# the four ranks about 0.15 CPU-s, and they only check that the old release kept answering (silences under 5 s).
INTERVAL = 0.5
TEST_INTERVAL = 1.0


class Prober(threading.Thread):
    """Asks the engine for one token every `interval` seconds; keeps the time of every answer."""

    def __init__(self, url, key, model, interval=INTERVAL, cafile=None):
        super().__init__(daemon=True)
        self.url, self.key, self.model, self.interval = url, key, model, interval
        # An https url is verified with cafile (the cluster CA of dgxspark_api_tls=generated).
        self.context = ssl.create_default_context(cafile=cafile) if url.startswith("https:") else None
        self.answers = []
        self.failures = []  # the time of every request that got no answer (an error status, a refused or cut connection)
        self.stopped = threading.Event()

    @classmethod
    def of_lab(cls, lab, model, interval=INTERVAL):
        """A prober of the lab's head API over the management network, with the key the deploy generated."""
        with open("%s/secrets/vllm_api_key" % lab.state_dir, encoding="utf-8") as handle:
            key = handle.read().strip()
        return cls(api_url(lab, "/v1/chat/completions"), key, model, interval, cafile=api_ca_file(lab))

    def ask(self):
        body = json.dumps({"model": self.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).encode()
        request = urllib.request.Request(self.url, data=body, method="POST", headers={
            "Authorization": "Bearer " + self.key, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=5, context=self.context) as response:
                return response.status == 200 and json.load(response).get("choices")
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def run(self):
        while not self.stopped.is_set():
            started = time.time()
            if self.ask():
                self.answers.append(time.time())
            else:
                self.failures.append(time.time())
            self.stopped.wait(max(0.0, self.interval - (time.time() - started)))

    def downtime(self, start, end):
        """The longest window without an answer that overlaps [start, end] (the first answer after end closes it)."""
        times = [t for t in self.answers if t < start][-1:] + [t for t in self.answers if start <= t <= end]
        times += [t for t in self.answers if t > end][:1]
        if len(times) < 2:
            return float("nan")
        return max(b - a for a, b in zip(times, times[1:]))

    def longest_silence_within(self, start, end):
        """The longest time inside [start, end] without an answer (its edges count: no answer at all is end - start)."""
        times = [start] + [t for t in self.answers if start <= t <= end] + [end]
        return max(b - a for a, b in zip(times, times[1:]))

    def wait_answer(self, after, timeout=900):
        """The time of the first answer after `after`; AssertionError when none comes within timeout."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            later = [t for t in self.answers if t > after]
            if later:
                return later[0]
            time.sleep(0.1)
        raise AssertionError("no answer within %d s" % timeout)


# A model change on the lab: a second model directory, made on the head only (as a new download would be), so that the
# deploy's distribute phase has it to bring to every worker while the old release serves.
MODEL = "/var/lib/dgxspark-lab/models/qwen3-moe-tiny"
SECOND_MODEL = MODEL + "-second"
DISTRIBUTE_PLAY = "Bring the serving image and the model to every node that lacks them, verified"
# deploy.yml's play that changes the serving containers (Ray, then vLLM, group after group): a release's switch starts here.
SERVE_PLAY = "Serve each serving group in turn (Ray, vLLM, the release record, the supervisor)"


def stage_second_model(lab):
    """SECOND_MODEL on the head only (removed from the workers). Returns its path."""
    lab.host(lab.nodes[0]).check_output("rm -rf %s && cp -a %s %s" % (SECOND_MODEL, MODEL, SECOND_MODEL))
    for node in lab.nodes[1:]:
        lab.host(node).check_output("rm -rf %s" % SECOND_MODEL)
    return SECOND_MODEL


def report_distribution(prober, plays, kind, switch_play):
    """Prints how long a change's distribute phase took, the old release's longest silence meanwhile and the downtime
    from switch_play's start until now; returns the silence."""
    silence = prober.longest_silence_within(plays[DISTRIBUTE_PLAY], plays[switch_play])
    print("\n%s CHANGE distribute phase %.1f s, longest silence meanwhile %.1f s; downtime %.1f s" % (
        kind.upper(), plays[switch_play] - plays[DISTRIBUTE_PLAY], silence, prober.downtime(plays[switch_play], time.time())))
    return silence


class PlayStarts(dict):
    """{play name: when its first line came}, filled by passing it as run_playbook's on_line."""

    def __call__(self, line):
        if line.startswith("PLAY ["):
            self.setdefault(line[6:line.index("]")], time.time())


def stage_second_image(lab):
    """A second serving image, on the head only: the lab's image with one label more (another image ID, as a new
    release of the image would be), for a deploy to distribute and switch to. Returns its name."""
    image = lab.state()["serving_image"]
    second = image.rsplit(":", 1)[0] + ":second"
    lab.host(lab.nodes[0]).check_output(
        "docker image inspect {second} >/dev/null 2>&1 || {{ docker create --name dgxspark-lab-second {image} true >/dev/null"
        " && docker commit --change 'LABEL dgxspark.lab.release=second' dgxspark-lab-second {second} >/dev/null"
        " && docker rm dgxspark-lab-second >/dev/null; }}".format(image=image, second=second))
    for node in lab.nodes[1:]:
        lab.host(node).check_output("docker image rm --force %s >/dev/null 2>&1 || true" % second)
    return second
