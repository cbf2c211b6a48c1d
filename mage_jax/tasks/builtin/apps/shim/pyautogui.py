"""A minimal pyautogui stand-in over python-xlib XTEST, for the loopback OSWorld server.

OSWorld's controller drives the VM by POSTing `python -c "import pyautogui; ..."`
to /execute. The sandbox has python-xlib but not pyautogui, so the loopback
server puts this module first on PYTHONPATH. It covers the calls our remote
client emits: moveTo, click, rightClick, middleClick, doubleClick, dragTo,
scroll, write/typewrite, press, hotkey, keyDown, keyUp, mouseDown, mouseUp,
position, size.
"""
import time

from Xlib import X, XK, display as _display
from Xlib.ext import xtest

FAILSAFE = False
PAUSE = 0
_d = _display.Display()
_root = _d.screen().root
_ALIASES = {"ctrl": "Control_L", "alt": "Alt_L", "shift": "Shift_L", "win": "Super_L", "command": "Super_L",
            "enter": "Return", "return": "Return", "esc": "Escape", "escape": "Escape", "tab": "Tab",
            "backspace": "BackSpace", "delete": "Delete", "del": "Delete", "space": "space", "up": "Up",
            "down": "Down", "left": "Left", "right": "Right", "home": "Home", "end": "End",
            "pageup": "Prior", "pagedown": "Next", "insert": "Insert", "capslock": "Caps_Lock",
            "printscreen": "Print", "numlock": "Num_Lock", "scrolllock": "Scroll_Lock", "pause": "Pause",
            "apps": "Menu"}  # every name mage_jax.actions.keys.pyautogui_name emits


def size():
  s = _d.screen()
  return s.width_in_pixels, s.height_in_pixels


def position():
  p = _root.query_pointer()
  return p.root_x, p.root_y


def _keysym(name):
  if name.lower() in _ALIASES:
    return XK.string_to_keysym(_ALIASES[name.lower()])
  if len(name) == 1:
    code = ord(name)
    return code if 0x20 <= code <= 0xFF else 0x01000000 + code
  return XK.string_to_keysym(name) or XK.string_to_keysym(name.capitalize())


def _keycode(sym):
  for code, index in _d.keysym_to_keycodes(sym):
    if index in (0, 1):
      return code, index == 1
  first = _d.display.info.min_keycode
  mapping = _d.get_keyboard_mapping(first, _d.display.info.max_keycode - first + 1)
  spare = [first + i for i, syms in enumerate(mapping) if not any(syms)][-1]
  _d.change_keyboard_mapping(spare, [(sym, sym)])
  _d.sync()
  return spare, False


def moveTo(x=None, y=None, duration=0.0, *args, **kwargs):
  if x is not None and y is not None:
    xtest.fake_input(_d, X.MotionNotify, x=int(x), y=int(y))
    _d.sync()


def _button(button):
  return {"left": 1, "middle": 2, "right": 3}.get(button, button)


def mouseDown(x=None, y=None, button="left"):
  moveTo(x, y)
  xtest.fake_input(_d, X.ButtonPress, _button(button))
  _d.sync()


def mouseUp(x=None, y=None, button="left"):
  moveTo(x, y)
  xtest.fake_input(_d, X.ButtonRelease, _button(button))
  _d.sync()


def click(x=None, y=None, clicks=1, interval=0.0, button="left", **kwargs):
  moveTo(x, y)
  for _ in range(clicks):
    mouseDown(button=button)
    mouseUp(button=button)
    time.sleep(0.02)


def rightClick(x=None, y=None):
  click(x, y, button="right")


def middleClick(x=None, y=None):
  click(x, y, button="middle")


def doubleClick(x=None, y=None, button="left"):
  click(x, y, clicks=2, button=button)


def dragTo(x, y, duration=0.5, button="left", mouseDownUp=True):
  x0, y0 = position()
  if mouseDownUp:
    mouseDown(button=button)
  steps = 10
  for i in range(1, steps + 1):
    moveTo(round(x0 + (x - x0) * i / steps), round(y0 + (y - y0) * i / steps))
    time.sleep(duration / steps)
  if mouseDownUp:
    mouseUp(button=button)


def scroll(clicks, x=None, y=None):
  moveTo(x, y)
  button = 4 if clicks > 0 else 5
  for _ in range(abs(int(clicks))):
    xtest.fake_input(_d, X.ButtonPress, button)
    xtest.fake_input(_d, X.ButtonRelease, button)
  _d.sync()


vscroll = scroll


def keyDown(key):
  xtest.fake_input(_d, X.KeyPress, _keycode(_keysym(key))[0])
  _d.sync()


def keyUp(key):
  xtest.fake_input(_d, X.KeyRelease, _keycode(_keysym(key))[0])
  _d.sync()


def hotkey(*keys, **kwargs):
  for k in keys:
    keyDown(k)
  for k in reversed(keys):
    keyUp(k)


def press(key, presses=1, **kwargs):
  for _ in range(presses):
    hotkey(key)


def write(text, interval=0.0):
  shift = _d.keysym_to_keycode(XK.string_to_keysym("Shift_L"))
  for ch in text:
    code, needs_shift = _keycode(_keysym({"\n": "enter", "\t": "tab"}.get(ch, ch)))
    if needs_shift:
      xtest.fake_input(_d, X.KeyPress, shift)
    xtest.fake_input(_d, X.KeyPress, code)
    xtest.fake_input(_d, X.KeyRelease, code)
    if needs_shift:
      xtest.fake_input(_d, X.KeyRelease, shift)
    _d.sync()
    time.sleep(0.005)


typewrite = write
