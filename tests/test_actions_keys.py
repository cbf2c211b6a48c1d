"""Key names: the spellings models write map to one canonical name on both desktop paths."""
import pytest

from mage_jax.actions import keys, parsing, schema


@pytest.mark.parametrize("written,canonical", [
    (["ctrl+s"], ["ctrl", "s"]),
    (["Ctrl+Shift+T"], ["ctrl", "shift", "T"]),
    (["ctrl++"], ["ctrl", "+"]),
    (["+"], ["+"]),
    (["page up"], ["pageup"]), (["Page_Down"], ["pagedown"]), (["PgDn"], ["pagedown"]), (["pgup"], ["pageup"]),
    (["Return"], ["enter"]), (["enter"], ["enter"]), (["ESC"], ["escape"]),
    (["ArrowLeft"], ["left"]), (["up arrow"], ["up"]), (["Right"], ["right"]),
    (["F5"], ["f5"]), (["f12"], ["f12"]),
    (["cmd", "c"], ["super", "c"]), (["win"], ["super"]), (["Super_L"], ["super"]), (["option"], ["alt"]),
    (["Control_L", "minus"], ["ctrl", "-"]), (["space"], ["space"]), ([" "], ["space"]),
    (["Del"], ["delete"]), (["BackSpace"], ["backspace"]),
])
def test_common_spellings(written, canonical):
  assert keys.parse_keys(written) == (canonical, None)


@pytest.mark.parametrize("bad", [["nosuchkey"], ["ctrl+"], ["F25"], ["\n"], ["é"], ["ctrl+shift+alt+super+a+b+c+d+e"]])
def test_unknown_keys_are_reasons_not_exceptions(bad):
  names, reason = keys.parse_keys(bad)
  assert names is None and reason


def test_pyautogui_names():
  names, _ = keys.parse_keys(["ctrl+S", "page up", "escape", "cmd", "F5", "/"])
  assert [keys.pyautogui_name(n) for n in names] == ["ctrl", "s", "pageup", "esc", "win", "f5", "/"]


def test_the_parser_validates_key_names():
  def turn(keys_json):
    return ('<think>\nx\n</think>\n\nAction: press\n<tool_call>\n{"name": "computer_use", "arguments": '
            '{"action": "key", "keys": ' + keys_json + '}}\n</tool_call>')
  assert parsing.parse_response(turn('["ctrl+s"]')).ok
  assert parsing.parse_response(turn('["page up"]')).ok
  bad = parsing.parse_response(turn('["hyperdrive"]'))
  assert bad.error_kind == parsing.INVALID_CALL and "unknown key name 'hyperdrive'" in bad.error
  assert schema.validate_call("computer_use", {"action": "key", "keys": ["ctrl", "s"]}) is None
