"""OSWorld's VLC settings checks over ~/.config/vlc/vlcrc, re-implemented from their documented
semantics (our code). The file arrives as bytes (None when absent: score 0).

As OSWorld reads it, a setting is the value after '=' on the last line that contains `key=`,
commented out or not (vlcrc lists every default as a comment, '#key=value'); without such a line the
setting has VLC's default. Checks (rules keys in brackets):
  check_qt_bgcone          qt-bgcone, default 1 [expected_qt_bgcone]
  check_qt_max_volume      qt-max-volume, default 125 [expected_qt_max_volume]
  check_qt_minimal_view    qt-minimal-view, default 0 [expected_qt_minimal_view]
  check_one_instance_when_started_from_file  one-instance-when-started-from-file, default 1
  check_global_key_play_pause  "1" when global-key-play-pause has a value, "0" when empty or absent
  check_qt_slider_colours  qt-slider-colours (12 numbers, 4 RGB colours), default VLC's; type match:
                           equals expected_qt_slider_colours; type blackish: every channel below 100
  is_vlc_recordings_folder the first uncommented line mentioning input-record-path has the value
                           recording_file_path
"""
from __future__ import annotations

SLIDER_DEFAULT = "153;210;153;20;210;20;255;199;15;245;39;29"


def setting(vlcrc: bytes, key: str, default: str) -> str:
  value = default
  for line in vlcrc.decode("utf-8", "replace").split("\n"):
    if f"{key}=" in line:
      value = line.split("=")[-1].strip()
  return value


def _check(key: str, default: str, rule_key: str):
  def check(result: bytes | None, rules: dict, **_) -> float:
    return float(result is not None and setting(result, key, default) == str(rules[rule_key]))
  check.__name__ = f"check_{key}"
  return check


check_qt_bgcone = _check("qt-bgcone", "1", "expected_qt_bgcone")
check_qt_max_volume = _check("qt-max-volume", "125", "expected_qt_max_volume")
check_qt_minimal_view = _check("qt-minimal-view", "0", "expected_qt_minimal_view")
check_one_instance_when_started_from_file = _check("one-instance-when-started-from-file", "1",
                                                   "expected_one_instance_when_started_from_file")


def check_global_key_play_pause(result: bytes | None, rules: dict, **_) -> float:
  if result is None:
    return 0.0
  on = "1" if setting(result, "global-key-play-pause", "") else "0"
  return float(on == str(rules["expected_global_key_play_pause"]))


def check_qt_slider_colours(result: bytes | None, rules: dict, **_) -> float:
  if result is None:
    return 0.0
  value = setting(result, "qt-slider-colours", SLIDER_DEFAULT)
  if rules["type"] == "match":
    return float(value == rules["expected_qt_slider_colours"])
  if rules["type"] == "blackish":
    try:
      numbers = [int(x) for x in value.split(";")]
    except ValueError:
      return 0.0
    return float(all(n < 100 for n in numbers[:len(numbers) // 3 * 3]))
  return 0.0


def is_vlc_recordings_folder(result: bytes | None, rules: dict, **_) -> float:
  if result is None:
    return 0.0
  for line in result.decode("utf-8", "replace").split("\n"):
    if line.startswith("#") or not line.strip():
      continue
    if "input-record-path" in line:
      return float(line.split("=")[-1].strip() == rules["recording_file_path"])
  return 0.0


NAMES = ("check_qt_bgcone", "check_qt_max_volume", "check_qt_minimal_view", "check_one_instance_when_started_from_file",
         "check_global_key_play_pause", "check_qt_slider_colours", "is_vlc_recordings_folder")
