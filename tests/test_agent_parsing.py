"""Parser: format -> parse round trip and every invalid case as a structured error."""
import pytest

from mage_jax.actions import parsing, schema as tools


@pytest.mark.parametrize("name,args", [
    ("computer_use", {"action": "left_click", "coordinate": [0, 999]}),
    ("computer_use", {"action": "key", "keys": ["ctrl", "s"]}),
    ("computer_use", {"action": "type", "text": "héllo \"quoted\" <tool_call>"}),
    ("computer_use", {"action": "terminate", "status": "success"}),
    ("bash", {"command": "cd /tmp && ls -la | head\necho done"}),
])
def test_round_trip(name, args):
  text = tools.format_response("I look at the screen.\nThen act.", "Do the thing", name, args)
  r = parsing.parse_response(text + "<|im_end|>")
  assert r.ok, r.error
  assert (r.think, r.summary, r.name, r.arguments) == ("I look at the screen.\nThen act.", "Do the thing", name, args)


def _turn(call: str, tail: str = "") -> str:
  return f"<think>\nhm\n</think>\n\nAction: act\n{call}{tail}"


@pytest.mark.parametrize("text,kind,needle", [
    ("<think>x</think>\nAction: nothing", parsing.NO_TOOL_CALL, "no <tool_call>"),
    (_turn('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
           '<tool_call>\n{"name": "bash", "arguments": {"command": "pwd"}}\n</tool_call>'),
     parsing.MULTIPLE_TOOL_CALLS, "<tool_call> blocks"),
    (_turn('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}\n</tool_call>'), parsing.BROKEN_JSON, "JSON"),
    (_turn('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}'), parsing.BROKEN_JSON, "not closed"),
    (_turn('<tool_call>\n{"name": "computer_use", "arguments": {"action": "fly"}}\n</tool_call>'),
     parsing.INVALID_CALL, "unknown action"),
    (_turn('<tool_call>\n{"name": "browser", "arguments": {}}\n</tool_call>'), parsing.INVALID_CALL, "unknown tool"),
    (_turn('<tool_call>\n{"name": "computer_use", "arguments": {"action": "left_click"}}\n</tool_call>'),
     parsing.INVALID_CALL, "missing argument"),
    (_turn('<tool_call>\n{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [5, 1000]}}'
           '\n</tool_call>'), parsing.INVALID_CALL, "out of range"),
    (_turn('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>', "\nand more"),
     parsing.TEXT_AFTER_CALL, "and more"),
])
def test_invalid_cases_become_errors(text, kind, needle):
  r = parsing.parse_response(text)
  assert not r.ok and r.error_kind == kind
  assert needle in r.error
  obs = r.error_observation()
  assert kind in obs and "<tool_call>" in obs


def test_garbage_never_raises():
  for text in ["", "<tool_call>", "<tool_call></tool_call>", "<tool_call>[1,2]</tool_call>",
               '<tool_call>{"name": 3, "arguments": 4}</tool_call>', "\x00\xff<think>"]:
    r = parsing.parse_response(text)
    assert not r.ok and r.error_kind in parsing.ERROR_KINDS


def _call(arguments_json: str, name: str = "computer_use") -> str:
  return _turn('<tool_call>\n{"name": "' + name + '", "arguments": ' + arguments_json + '}\n</tool_call>')


@pytest.mark.parametrize("text,needle", [
    (_call('{"action": "scroll", "pixels": ' + "9" * 5000 + "}"), "unreadable number"),   # ValueError before
    (_call('{"action": "key", "keys": ' + "[" * 2000 + "]" * 2000 + "}"), "nested too deeply"),  # RecursionError
    (_call('{"action": "left_click", "coordinate": ' + "[" * 900 + "]" * 900 + "}"), "coordinate must be"),
    (_call('{"command": "echo \\ud800"}', "bash"), "lone UTF-16 surrogate"),
    (_call('{"action": "type", "text": "a\\udfff"}'), "lone UTF-16 surrogate"),
    (_call('{"action": "scroll", "pixels": ' + "9" * 400 + "}"), "pixels must be within"),
    (_call('{"action": "key", "keys": ["ctrl+nosuchkey"]}'), "unknown key name 'nosuchkey'"),
    (_call('{"action": "key", "keys": ["a", "b", "c", "d", "e", "f", "g", "h", "i"]}'), "at most 8"),
])
def test_hostile_arguments_become_errors(text, needle):
  r = parsing.parse_response(text)
  assert not r.ok and r.error_kind in (parsing.BROKEN_JSON, parsing.INVALID_CALL), r
  assert needle in r.error and len(r.error) <= 310


def test_size_bound_and_linear_time():
  """Texts that made the old regexes quadratic (many unclosed <think>, many blank lines) stay fast."""
  import time
  too_long = parsing.parse_response("x" * (parsing.MAX_RESPONSE_CHARS + 1))
  assert too_long.error_kind == parsing.TOO_LONG
  for text in ["<think>" * 30_000, "\n" * 200_000 + "<tool_call>", " \n" * 100_000 + "<tool_call>"]:
    t0 = time.perf_counter()
    r = parsing.parse_response(text)
    assert not r.ok and time.perf_counter() - t0 < 2.0


def test_random_input_never_raises():
  """Fuzz: random bytes, random tag soup and random JSON structures through the parser."""
  import json
  import random
  rng = random.Random(0)
  atoms = ["<think>", "</think>", "<tool_call>", "</tool_call>", "\n", "Action: x", "{", "}", "[", "]", '"',
           ":", ",", "\\", "\\ud800", "9" * 30, "name", "arguments", "computer_use", "bash", "<|im_end|>"]

  def structure(depth):
    kind = rng.randrange(7 if depth < 6 else 4)
    if kind == 0:
      return rng.choice([None, True, 0, -1, 10**30, 1e308, float("nan"), 1.5])
    if kind == 1:
      return rng.choice(["", "ctrl+s", "page up", "\udc80", "x" * 50, "left_click"])
    if kind == 2:
      return rng.choice(list(tools.ACTIONS) + ["bash", "computer_use"])
    if kind == 3:
      return [rng.randrange(-5, 1200) for _ in range(rng.randrange(4))]
    if kind in (4, 5):
      keys = ["action", "keys", "text", "coordinate", "pixels", "time", "status", "command", "x"]
      return {rng.choice(keys): structure(depth + 1) for _ in range(rng.randrange(4))}
    return [structure(depth + 1) for _ in range(rng.randrange(4))]

  for i in range(3000):
    if i % 3 == 0:
      text = bytes(rng.randrange(256) for _ in range(rng.randrange(200))).decode("utf-8", "surrogateescape")
    elif i % 3 == 1:
      text = "".join(rng.choice(atoms) for _ in range(rng.randrange(40)))
    else:
      call = {"name": rng.choice(["computer_use", "bash", 3]), "arguments": structure(0)}
      text = _turn("<tool_call>\n" + json.dumps(call, ensure_ascii=rng.random() < 0.5) + "\n</tool_call>")
    r = parsing.parse_response(text)
    assert r.ok or r.error_kind in parsing.ERROR_KINDS
    if r.ok:
      assert tools.validate_call(r.name, r.arguments) is None


def test_the_action_contract_imports_neither_data_nor_agent():
  """mage_jax.actions sits between the model's text and both sides; it must not pull either in."""
  import subprocess
  import sys
  code = ("import sys, mage_jax.actions.schema, mage_jax.actions.parsing, mage_jax.actions.keys; "
          "print(sorted(m for m in sys.modules if m.startswith(('mage_jax.data', 'mage_jax.agent'))))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
  assert out.strip() == "[]"
