"""The OSWorld-style remote client against the loopback server (real HTTP, real desktop)."""
import pytest

from mage_jax.agent.env import EnvConfig
from mage_jax.agent.remote import RemoteEnv, pyautogui_command
from mage_jax.forge import package_gates as gates
from mage_jax.tasks.builtin import builtin_packages
from tests._agent_helpers import needs_sandbox

TASKS = {p.id: p for p in builtin_packages()}


def test_pyautogui_commands():
  assert pyautogui_command({"action": "left_click", "coordinate": [999, 0]}, 1280, 800) == "pyautogui.click(1279, 0)"
  assert pyautogui_command({"action": "key", "keys": ["ctrl", "S"]}, 10, 10) == "pyautogui.hotkey('ctrl', 's')"
  # the local desktop's spellings (actions.keys); the old client sent 'page up' to pyautogui verbatim
  assert pyautogui_command({"action": "key", "keys": ["ctrl+s"]}, 10, 10) == "pyautogui.hotkey('ctrl', 's')"
  assert pyautogui_command({"action": "key", "keys": ["page up"]}, 10, 10) == "pyautogui.hotkey('pageup')"
  assert pyautogui_command({"action": "key", "keys": ["Return"]}, 10, 10) == "pyautogui.hotkey('enter')"
  assert pyautogui_command({"action": "key", "keys": ["cmd", "Escape"]}, 10, 10) == "pyautogui.hotkey('win', 'esc')"
  assert pyautogui_command({"action": "scroll", "pixels": -120}, 10, 10) == "pyautogui.scroll(-2)"
  assert pyautogui_command({"action": "type", "text": "a'b"}, 10, 10) == 'pyautogui.write("a\'b")'
  assert pyautogui_command({"action": "wait", "time": 1}, 10, 10) is None


@pytest.fixture(scope="module")
def server():
  from mage_jax.agent.osworld_server import OSWorldLoopback
  srv = OSWorldLoopback(EnvConfig(width=800, height=600))
  yield srv
  srv.close()


@needs_sandbox
@pytest.mark.timeout(120)
def test_routes_and_bash_cwd(server):
  env = RemoteEnv(server.url, command_timeout=5)
  env.reset(TASKS["term_multiply"])
  assert env.screenshot().size == (800, 600)
  assert env.step("bash", {"command": "mkdir -p a/b && cd a/b && pwd"}).text == "/home/user/a/b"
  assert env.step("bash", {"command": "pwd; false"}).text == "/home/user/a/b\n[exit code 1]"
  resp = env.run_bash_script("sleep 10", timeout=1)
  assert resp["status"] == "error" and resp["returncode"] == -1 and "timed out" in resp["output"]
  out = env.execute(["python", "-c", "import sys; print('out'); print('err', file=sys.stderr)"])
  assert out == {"status": "success", "output": "out\n", "error": "err\n", "returncode": 0}
  env.write_file("up/x.bin", b"\x00\x01binary")
  assert env.read_file("up/x.bin") == b"\x00\x01binary" and env.read_file("nope") is None
  # a lone surrogate: an error observation from the client, a 400 from the server, no traceback
  assert env.step("bash", {"command": "echo \ud800"}).text.startswith("Error: bash: command holds a lone")
  resp = env.run_bash_script("echo \ud800")
  assert resp["status"] == "error" and "not valid text" in resp["output"]
  assert env.step("computer_use", {"action": "key", "keys": ["page up"]}).text is None  # pyautogui.hotkey('pageup')


@needs_sandbox
@pytest.mark.timeout(300)
@pytest.mark.parametrize("task_id", ["gui_form_fill", "hyb_rename_then_list"])
def test_gates_pass_over_http(server, task_id):
  res = gates.check_package(TASKS[task_id], lambda: RemoteEnv(server.url))
  assert res.passed, str(res)
