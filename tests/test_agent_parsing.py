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
