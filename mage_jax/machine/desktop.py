"""A real X desktop inside the episode's sandbox: Xvfb + XTEST input + screenshots.

Xvfb runs on the sandbox's filesystem and network (display :0, no TCP) but
outside its pid and user namespaces (`Sandbox.spawn_service`), so every sandbox
has its own display, the apps and the shell share its filesystem, and the
workload can neither see, signal nor trace the X server. The harness connects
to the X socket through the sandbox's root fd held since start-up
(`Sandbox.host_root` + `/tmp/.X11-unix/X0`), a directory on its own tmpfs that
is sealed read-only once the socket exists (`Sandbox.service_dir`), injects input
with XTEST (python-xlib `fake_input`) and reads the framebuffer with
`GetImage`.
"""
from __future__ import annotations

import math
import os
import socket
import stat
import subprocess
import threading
import time
from typing import Any, Sequence

from PIL import Image
from Xlib import X, XK, display as xdisplay
from Xlib.ext import xtest
from Xlib.support import unix_connect

from mage_jax.actions import keys, schema as tools
from mage_jax.machine.sandbox import Sandbox, sandbox_env

# python-xlib only knows /tmp/.X11-unix/X<n>; we route private display numbers to socket paths.
_SOCKETS: dict[int, str] = {}
_SOCKETS_LOCK = threading.Lock()
_orig_get_socket = unix_connect.get_socket


def _get_socket(dname, protocol, host, dno):
  path = _SOCKETS.get(dno)
  if path is None:
    return _orig_get_socket(dname, protocol, host, dno)
  s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
  s.connect(path)
  return s


unix_connect.get_socket = _get_socket

X_SOCKET_DIR = "/tmp/.X11-unix"  # where X clients look for display :0's socket
XKM_DIR = "/var/lib/xkb"         # Xvfb's compiled-in output dir for keymaps (Debian)
SCROLL_PIXELS_PER_CLICK = tools.SCROLL_PIXELS_PER_CLICK


def keysym_for(canonical: str) -> int:
  """A canonical key name (`actions.keys.parse_keys`) -> X keysym."""
  name = keys.x_keysym_name(canonical)
  return XK.string_to_keysym(name) if name else _char_keysym(canonical)


def _char_keysym(ch: str) -> int:
  special = {"\n": "Return", "\t": "Tab", " ": "space"}
  if ch in special:
    return XK.string_to_keysym(special[ch])
  code = ord(ch)
  return code if 0x20 <= code <= 0xFF else 0x01000000 + code


class Desktop:
  """Xvfb in `sandbox` plus an XTEST connection."""

  def __init__(self, sandbox: Sandbox, width: int = 1280, height: int = 800, settle: float = 0.08):
    self.sandbox, self.width, self.height, self.settle = sandbox, width, height, settle
    self._apps: list[subprocess.Popen] = []
    # The socket's directory is the harness's: a fresh tmpfs owned by the service, sealed
    # read-only once Xvfb made its socket, so the workload can't replace the socket the harness
    # (and every app) connects to.
    sandbox.service_dir(X_SOCKET_DIR)
    # /var/lib/xkb private to Xvfb: it compiles keymaps there (else into the workload's /tmp)
    # and reads them back, also when a client asks for a new keymap
    self._xvfb = sandbox.spawn_service(["Xvfb", ":0", "-screen", "0", f"{width}x{height}x24", "-nolisten", "tcp",
                                        "-noreset"], private_dirs=(XKM_DIR,),
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    sock = f"{sandbox.host_root}{X_SOCKET_DIR}/X0"
    deadline = time.monotonic() + 20
    while not os.path.exists(sock):
      if self._xvfb.poll() is not None or time.monotonic() > deadline:
        err = self._xvfb.stderr.read().decode(errors="replace") if self._xvfb.poll() is not None else "timeout"
        raise RuntimeError(f"Xvfb did not start in the sandbox: {err[-500:]}")
      time.sleep(0.05)
    sandbox.seal_service_dir(X_SOCKET_DIR)
    st = os.lstat(sock)
    if not stat.S_ISSOCK(st.st_mode) or (sandbox.mode == "root" and st.st_uid != sandbox.service_uid):
      raise RuntimeError(f"{X_SOCKET_DIR}/X0 is not the X server's socket (mode {stat.filemode(st.st_mode)}, "
                         f"uid {st.st_uid})")
    with _SOCKETS_LOCK:
      self._dno = 1000 + sandbox.pid  # private number, unique per live sandbox
      _SOCKETS[self._dno] = sock
    for _ in range(100):
      try:
        self.display = xdisplay.Display(f":{self._dno}")
        break
      except Exception:  # the socket exists before Xvfb accepts
        time.sleep(0.05)
    else:
      raise RuntimeError("could not connect to Xvfb")
    if not self.display.query_extension("XTEST").present:
      raise RuntimeError("Xvfb has no XTEST extension")
    self.root = self.display.screen().root
    self._spare_keycode: int | None = None

  # ---- apps --------------------------------------------------------------------------------
  def launch(self, argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    p = self.sandbox.spawn(argv, env=env or sandbox_env(":0"), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    self._apps.append(p)
    return p

  def alive(self) -> bool:
    """False once the X server has exited (the workload may have killed it)."""
    return self._xvfb.poll() is None

  def close(self) -> None:
    try:
      self.display.close()
    except Exception:
      pass
    with _SOCKETS_LOCK:
      _SOCKETS.pop(self._dno, None)
    for p in self._apps + [self._xvfb]:
      if p.poll() is None:
        p.kill()
      p.wait()
    if self._xvfb.stderr:
      self._xvfb.stderr.close()

  # ---- observation -------------------------------------------------------------------------
  def screenshot(self) -> Image.Image:
    raw = self.root.get_image(0, 0, self.width, self.height, X.ZPixmap, 0xFFFFFFFF)
    return Image.frombytes("RGB", (self.width, self.height), raw.data, "raw", "BGRX")

  def pointer(self) -> tuple[int, int]:
    p = self.root.query_pointer()
    return p.root_x, p.root_y

  def to_pixels(self, coordinate: Sequence[int]) -> tuple[int, int]:
    return tools.to_pixel(coordinate[0], self.width), tools.to_pixel(coordinate[1], self.height)

  # ---- input -------------------------------------------------------------------------------
  def _sync(self) -> None:
    self.display.sync()
    time.sleep(self.settle)

  def move(self, x: int, y: int) -> None:
    xtest.fake_input(self.display, X.MotionNotify, x=x, y=y)
    self.display.sync()

  def click(self, x: int, y: int, button: int = 1, count: int = 1) -> None:
    self.move(x, y)
    for _ in range(count):
      xtest.fake_input(self.display, X.ButtonPress, button)
      xtest.fake_input(self.display, X.ButtonRelease, button)
      self.display.sync()
      time.sleep(0.02)
    self._sync()

  def drag(self, x: int, y: int, steps: int = 10) -> None:
    x0, y0 = self.pointer()
    xtest.fake_input(self.display, X.ButtonPress, 1)
    self.display.sync()
    for i in range(1, steps + 1):
      self.move(round(x0 + (x - x0) * i / steps), round(y0 + (y - y0) * i / steps))
      time.sleep(0.01)
    xtest.fake_input(self.display, X.ButtonRelease, 1)
    self._sync()

  def scroll(self, pixels: int) -> None:
    button = 4 if pixels > 0 else 5
    for _ in range(min(50, max(1, math.ceil(abs(pixels) / SCROLL_PIXELS_PER_CLICK)))):
      xtest.fake_input(self.display, X.ButtonPress, button)
      xtest.fake_input(self.display, X.ButtonRelease, button)
    self._sync()

  def _keycode(self, keysym: int) -> tuple[int, bool]:
    """(keycode, needs_shift); maps a spare keycode for keysyms the keymap lacks."""
    for code, index in self.display.keysym_to_keycodes(keysym):
      if index in (0, 1):
        return code, index == 1
    if self._spare_keycode is None:
      first = self.display.display.info.min_keycode
      count = self.display.display.info.max_keycode - first + 1
      mapping = self.display.get_keyboard_mapping(first, count)
      spare = [first + i for i, syms in enumerate(mapping) if not any(syms)]
      if not spare:
        raise ValueError("no spare keycode to map a character")
      self._spare_keycode = spare[-1]
    self.display.change_keyboard_mapping(self._spare_keycode, [(keysym, keysym)])
    self.display.sync()
    return self._spare_keycode, False

  def key_combo(self, names: Sequence[str]) -> None:
    """Presses `names` in order and releases them in reverse; ValueError names an unknown key."""
    canonical, reason = keys.parse_keys(names)
    if reason:
      raise ValueError(reason)
    codes = [self._keycode(keysym_for(n))[0] for n in canonical]
    for c in codes:
      xtest.fake_input(self.display, X.KeyPress, c)
    for c in reversed(codes):
      xtest.fake_input(self.display, X.KeyRelease, c)
    self._sync()

  def type_text(self, text: str) -> None:
    shift = self.display.keysym_to_keycode(XK.string_to_keysym("Shift_L"))
    for ch in text:
      code, needs_shift = self._keycode(_char_keysym(ch))
      if needs_shift:
        xtest.fake_input(self.display, X.KeyPress, shift)
      xtest.fake_input(self.display, X.KeyPress, code)
      xtest.fake_input(self.display, X.KeyRelease, code)
      if needs_shift:
        xtest.fake_input(self.display, X.KeyRelease, shift)
      self.display.sync()
      time.sleep(0.005)
    self._sync()

  def execute(self, arguments: dict[str, Any]) -> str:
    """Runs one validated `computer_use` call; returns a short text note for the observation."""
    action = arguments["action"]
    if action in ("mouse_move", "left_click", "right_click", "middle_click", "double_click",
                  "left_click_drag"):
      x, y = self.to_pixels(arguments["coordinate"])
      if action == "mouse_move":
        self.move(x, y)
        self._sync()
      elif action == "left_click_drag":
        self.drag(x, y)
      else:
        button = {"left_click": 1, "double_click": 1, "middle_click": 2, "right_click": 3}[action]
        self.click(x, y, button, 2 if action == "double_click" else 1)
    elif action == "key":
      self.key_combo(arguments["keys"])
    elif action == "type":
      self.type_text(arguments["text"])
    elif action == "scroll":
      self.scroll(arguments["pixels"])
    elif action == "wait":
      time.sleep(float(arguments["time"]))
    return ""
