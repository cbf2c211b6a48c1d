"""The Xvfb desktop: XTEST input, key names, coordinate mapping, screenshots, real Tk apps."""
import json
import time

import pytest
from Xlib import XK

from mage_jax.actions import keys, schema as tools
from mage_jax.machine import desktop
from mage_jax.tasks.package import package_from_dict
from tests._agent_helpers import local_env, needs_sandbox


def test_key_names():
  assert desktop.keysym_for("ctrl") == XK.string_to_keysym("Control_L")
  assert desktop.keysym_for("enter") == XK.string_to_keysym("Return")
  assert desktop.keysym_for("pageup") == XK.string_to_keysym("Prior")
  assert desktop.keysym_for("a") == ord("a")
  assert desktop.keysym_for("f5") == XK.string_to_keysym("F5")
  assert desktop.keysym_for("€") == 0x01000000 + ord("€")


def test_every_canonical_key_has_an_x_keysym():
  """Each named key of actions.keys exists in X's keysym table (a typo there would press nothing)."""
  for name in keys.NAMED_KEYS:
    assert desktop.keysym_for(name) != 0, name


def _until(cond, timeout=5.0):
  """Polls `cond` (apps react on their own schedule) instead of sleeping a fixed time."""
  deadline = time.monotonic() + timeout
  while not cond() and time.monotonic() < deadline:
    time.sleep(0.05)
  return cond()


def _json(data):
  try:
    return json.loads(data)
  except (TypeError, ValueError):  # not written yet, or half written
    return None


def _form_task(extra=()):
  return package_from_dict({
      "id": "t", "kind": "gui", "instruction": "x", "checker": {"type": "file_exists", "path": "out.json"},
      "setup": [{"type": "app", "config": {"kind": "form", "name": "form", "out": "/home/user/out.json",
                                           "fields": ["A"]}}, *extra]})


@needs_sandbox
@pytest.mark.timeout(120)
def test_actions_on_a_real_tk_app():
  env = local_env()
  try:
    obs = env.reset(_form_task())
    shot = obs.screenshot
    assert shot.size == (800, 600)
    assert shot.getpixel((790, 590)) == (0, 0, 0)          # bare root window (no window manager)
    assert shot.getpixel((300, 20)) != (0, 0, 0)           # the Tk window at +0+0
    # coordinate mapping: [0, 999] covers the first..last pixel
    env.step("computer_use", {"action": "mouse_move", "coordinate": [999, 999]})
    assert env.desktop.pointer() == (799, 599)
    env.step("computer_use", {"action": "mouse_move", "coordinate": [0, 0]})
    assert env.desktop.pointer() == (0, 0)
    env.step("computer_use", {"action": "left_click", "coordinate": env.widget_coordinate("form.field:A")})
    env.step("computer_use", {"action": "type", "text": "Hi there, ünï/42"})
    # the form binds Ctrl+S to Save; "ctrl+s" and "page up" raised ValueError in desktop.py before actions.keys
    assert env.step("computer_use", {"action": "key", "keys": ["page up"]}).text is None
    env.step("computer_use", {"action": "key", "keys": ["ctrl+s"]})
    assert _until(lambda: (_json(env.read_file("out.json")) or {}).get("A") == "Hi there, ünï/42"), \
        env.read_file("out.json")
    after = env.screenshot()
    assert after.tobytes() != shot.tobytes()               # the typed text is visible
    bad = env.step("computer_use", {"action": "key", "keys": ["hyperdrive"]})
    assert bad.text.startswith("Error: computer_use.key: unknown key name 'hyperdrive'") and bad.screenshot
    assert env.step("computer_use", {"action": "terminate", "status": "success"}).done
  finally:
    env.close()


@needs_sandbox
@pytest.mark.timeout(120)
def test_scroll():
  env = local_env()
  items = [f"row {i:02d}" for i in range(40)]
  task = package_from_dict({
      "id": "t", "kind": "gui", "instruction": "x", "checker": {"type": "file_exists", "path": "p.json"},
      "setup": [{"type": "app", "config": {"kind": "picker", "name": "picker", "items": items, "out": "/home/user/p.json"}}]})
  try:
    env.reset(task)
    layout = lambda app: json.loads(env.read_file(f"/tmp/.mage_layout/{app}.json"))
    assert "item:row 35" not in layout("picker")
    env.step("computer_use", {"action": "mouse_move", "coordinate": env.widget_coordinate("picker.list")})
    env.step("computer_use", {"action": "scroll", "pixels": -1500})
    assert _until(lambda: "item:row 35" in layout("picker") and "item:row 00" not in layout("picker"))
    env.step("computer_use", {"action": "scroll", "pixels": 1500})
    assert _until(lambda: "item:row 00" in layout("picker"))
  finally:
    env.close()
