"""The official OpenAI Python SDK against the lab's cluster (issue 50, item 11: "the lab serves what a real client sends").

Every request shape the docs promise, as a client sends it: the model list, a chat, a stream with its usage, completions
with logprobs, several choices (`n`), a stop sequence, a tool call (the lab's profile enables tools), a wrong key (401)
and an unknown model (404). Then four `logprobs` requests in a row leave the cluster serving: the supervisor restarted
nothing and the engine's container is the one that served before. (Before the lab's `TORCHDYNAMO_DISABLE`, the first
`logprobs` request killed the engine: vLLM's sampler compiles a helper with Inductor, which found no C++ compiler in the
lab's serving image; inventories/lab.)

It reuses the serving cluster the serving modules leave (ansible_lab.serving_cluster) and costs a few seconds of
requests. On a 2-node lab (DGXSPARK_LAB_NODES=2) it serves the 2-node shape of molecule's scenarios with the lab
profile's tool and reasoning parsers, deployed only when nothing answers yet.

    DGXSPARK_LAB_NODES=2 .venv/bin/python -m pytest -m lab tests/lab/test_openai_client_lab.py
"""

import json
import os
import ssl
import time

import openai
import pytest
import yaml

from ansible_lab import HEAD, REPO, VLLM, api_ca_file, api_url, extra_vars, playbook_ok, serving_cluster, serving_lab

pytestmark = pytest.mark.lab

SUPERVISOR_REPORT = "/var/lib/dgxspark/supervisor/report.json"
# The lab inventory's supervisor interval (inventories/lab/group_vars/all.yml).
INTERVAL_S = 10
TWO_NODE_VARS_FILE = os.path.join(REPO, "molecule", "shared", "group_vars", "all", "20-two-node-cluster.yml")
# The lab profile's (qwen3_5_397b_a17b_fp8) parsers, which the 2-node shape's profile does not have.
LAB_PROFILE_PARSERS = {"reasoning_parser": "qwen3", "tool_call_parser": "qwen3_xml", "enable_auto_tool_choice": True}
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def client(lab, key=None):
    """The SDK's client for the head's API, with the lab's key; no retries, so that a 500 is seen, not repeated."""
    if key is None:
        with open(os.path.join(lab.state_dir, "secrets", "vllm_api_key"), encoding="utf-8") as handle:
            key = handle.read().strip()
    # With the lab's TLS, the SDK verifies the head's certificate with the cluster CA, as a user's client does.
    cafile = api_ca_file(lab)
    http_client = openai.DefaultHttpxClient(verify=ssl.create_default_context(cafile=cafile)) if cafile else None
    return openai.OpenAI(base_url=api_url(lab, "/v1", HEAD), api_key=key, max_retries=0, timeout=120, http_client=http_client)


def models(lab):
    """The served model names, or None when the API does not answer."""
    try:
        return [model.id for model in client(lab).models.list()]
    except (openai.APIError, OSError):
        return None


def supervisor_report(lab):
    return json.loads(lab.host(HEAD).check_output("cat %s" % SUPERVISOR_REPORT))


def engine_started(lab):
    return lab.host(HEAD).check_output("docker inspect -f '{{.State.StartedAt}}' %s" % VLLM)


def engine_running(lab):
    return lab.host(HEAD).check_output("docker inspect -f '{{.State.Running}}' %s" % VLLM) == "true"


def engine_args(lab):
    return json.loads(lab.host(HEAD).check_output("docker inspect -f '{{json .Args}}' %s" % VLLM))


def two_node_cluster(lab):
    """The 2-node lab serving molecule's 2-node shape with the lab profile's parsers: deployed when nothing answers."""
    serving_lab(lab, count=2)
    if not models(lab):
        with open(TWO_NODE_VARS_FILE, encoding="utf-8") as handle:
            two_node = yaml.safe_load(handle)
        playbook_ok(lab, "deploy.yml", "--skip-tags", "os,monitoring",
                    *extra_vars(two_node, dgxspark_tensor_parallel_size=2, vllm_container_extra_args=LAB_PROFILE_PARSERS))
    return lab


@pytest.fixture(scope="module")
def served(lab):
    """(lab, served model name): the cluster serving, and the supervisor seeing it serve."""
    cluster = two_node_cluster(lab) if lab.count == 2 else serving_cluster(lab)
    deadline = time.time() + 120
    while supervisor_report(cluster)["phase"] != "serving" and time.time() < deadline:
        time.sleep(2)
    assert supervisor_report(cluster)["phase"] == "serving", supervisor_report(cluster)
    names = models(cluster)
    assert names and len(names) == 1, names
    return cluster, names[0]


def test_the_model_list_names_the_served_model(served):
    lab, model = served
    listed = client(lab).models.list().data
    assert [entry.id for entry in listed] == [model] and listed[0].object == "model"


def test_a_chat_answers_with_its_usage(served):
    lab, model = served
    answer = client(lab).chat.completions.create(model=model, max_tokens=8, temperature=0,
                                                 messages=[{"role": "user", "content": "Say hello."}])
    assert answer.model == model and answer.choices[0].message.role == "assistant"
    assert answer.choices[0].finish_reason in ("stop", "length")
    assert 0 < answer.usage.completion_tokens <= 8 and answer.usage.prompt_tokens > 0


def test_a_stream_ends_with_the_usage_of_every_token_it_sent(served):
    lab, model = served
    chunks = list(client(lab).chat.completions.create(
        model=model, max_tokens=8, temperature=0, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Count to three."}]))
    usage = chunks[-1].usage
    assert usage is not None and chunks[-1].choices == [], chunks[-1]
    assert all(chunk.usage is None for chunk in chunks[:-1])
    finished = [choice.finish_reason for chunk in chunks[:-1] for choice in chunk.choices if choice.finish_reason]
    assert finished in (["stop"], ["length"]), finished
    assert 0 < usage.completion_tokens <= 8 and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_completions_with_logprobs_give_one_per_token(served):
    lab, model = served
    answer = client(lab).completions.create(model=model, prompt="The Zen of Python", max_tokens=6, temperature=0, logprobs=2)
    logprobs = answer.choices[0].logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == answer.usage.completion_tokens > 0, logprobs
    assert all(value <= 0.0 for value in logprobs.token_logprobs), logprobs.token_logprobs
    # the top 2, and the sampled token where it is not among them
    assert all(2 <= len(top) <= 3 for top in logprobs.top_logprobs), logprobs.top_logprobs


def test_a_chat_with_logprobs_gives_the_top_ones_per_token(served):
    lab, model = served
    answer = client(lab).chat.completions.create(model=model, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3,
                                                 messages=[{"role": "user", "content": "Hello"}])
    content = answer.choices[0].logprobs.content
    assert len(content) == answer.usage.completion_tokens > 0
    assert all(len(token.top_logprobs) == 3 and token.logprob <= 0.0 for token in content), content


def test_n_gives_that_many_choices(served):
    lab, model = served
    answer = client(lab).completions.create(model=model, prompt="Beautiful is better than", max_tokens=5, n=3, seed=7)
    assert sorted(choice.index for choice in answer.choices) == [0, 1, 2]
    assert all(choice.finish_reason in ("stop", "length") for choice in answer.choices), answer.choices
    # The usage adds up every choice's tokens (one choice has 5 at most).
    assert 5 < answer.usage.completion_tokens <= 3 * 5, answer.usage


def test_a_stop_sequence_ends_the_text_before_it(served):
    lab, model = served
    api = client(lab)
    free = api.completions.create(model=model, prompt="Simple is better than", max_tokens=24, temperature=0).choices[0].text
    # A stop string taken from the middle of the greedy answer: the same request with it must end just before it.
    middle = len(free) // 2
    stop = free[middle:middle + 2]
    assert len(stop) == 2 and stop.strip(), repr(free)
    stopped = api.completions.create(model=model, prompt="Simple is better than", max_tokens=24, temperature=0, stop=[stop])
    assert stopped.choices[0].finish_reason == "stop", stopped
    assert stopped.choices[0].text == free[:free.index(stop)], (free, stop, stopped.choices[0].text)


def test_a_tool_call_request_is_served_by_the_profiles_parser(served):
    lab, model = served
    args = engine_args(lab)
    if "--enable-auto-tool-choice" not in args:
        pytest.skip("the served profile does not enable tools: %s" % args)
    answer = client(lab).chat.completions.create(
        model=model, max_tokens=16, temperature=0, tools=[WEATHER_TOOL], tool_choice="auto",
        messages=[{"role": "user", "content": "What is the weather in Paris?"}])
    choice = answer.choices[0]
    # The lab's model answers noise: the parser finds a call or none, and the answer says which.
    assert choice.finish_reason in ("stop", "length", "tool_calls"), choice
    for call in choice.message.tool_calls or []:
        assert call.function.name == "get_weather" and call.type == "function", call


def test_a_wrong_key_is_refused_with_401(served):
    lab, model = served
    with pytest.raises(openai.AuthenticationError) as refused:
        client(lab, key="not-the-key").chat.completions.create(model=model, max_tokens=1,
                                                               messages=[{"role": "user", "content": "hi"}])
    assert refused.value.status_code == 401
    with pytest.raises(openai.AuthenticationError):
        client(lab, key="not-the-key").models.list()


def test_an_unknown_model_is_refused_with_404(served):
    lab, _model = served
    with pytest.raises(openai.NotFoundError) as refused:
        client(lab).chat.completions.create(model="no-such-model", max_tokens=1, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.status_code == 404 and "no-such-model" in str(refused.value)


def test_four_logprobs_requests_in_a_row_leave_the_cluster_serving(served):
    lab, model = served
    restarts, started = supervisor_report(lab)["restarts"], engine_started(lab)
    api = client(lab)
    for number in range(4):
        answer = api.completions.create(model=model, prompt="Errors should never pass silently. %d" % number,
                                        max_tokens=4, temperature=0, logprobs=1)
        assert len(answer.choices[0].logprobs.token_logprobs) == answer.usage.completion_tokens > 0
    # A dead engine's API server exits within seconds (EngineDeadError), and the supervisor's next look restarts the
    # group: one interval later, the same container still runs and the supervisor restarted nothing.
    time.sleep(INTERVAL_S + 2)
    report = supervisor_report(lab)
    assert report["phase"] == "serving" and report["restarts"] == restarts, report
    assert engine_started(lab) == started and engine_running(lab)
    assert api.completions.create(model=model, prompt="Now is better than never.", max_tokens=2).usage.completion_tokens > 0
