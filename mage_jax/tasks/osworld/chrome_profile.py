"""OSWorld's Chrome profile getters and their checks, re-implemented from their documented
semantics (our code). Chromium's profile (~/.config/chromium) stands in for google-chrome's.

Getters (the files arrive as bytes, None when absent):
  chrome_font_size          Preferences' webkit.webprefs, or Chrome's defaults (default_font_size 16,
                            default_fixed_font_size 13, minimum_font_size 13) when unset
  data_delete_automacally   "true" when Preferences' profile has default_content_setting_values, else
                            "false"
  enabled_experiments       Local State's browser.enabled_labs_experiments ([] when unset)
  cookie_data               every row of the Cookies database's cookies table (host_key second)
  shortcuts_on_desktop      {file name: text} of every .desktop file in ~/Desktop
Checks:
  check_font_size           rules type value (default_font_size equals value) or range (strictly
                            between min and max)
  check_enabled_experiments rules {type: names, names}: the experiments' names (before "@") equal
                            the list, in order
  is_cookie_deleted         rules {type: domains, domains}: the cookie database is readable and no
                            cookie's host equals a domain after URL normalisation (rule_metrics.normalize_url)
  is_shortcut_on_desktop    rules {type: name, name}: some shortcut has the line "Name=<name>"
"""
from __future__ import annotations

import json
import sqlite3
from typing import Any, Callable

from mage_jax.tasks.osworld.rule_metrics import normalize_url

PROFILE = "/home/user/.config/chromium"
DEFAULT_WEBPREFS = {"default_fixed_font_size": 13, "default_font_size": 16, "minimum_font_size": 13}


def _json(data: bytes | None) -> dict:
  try:
    return json.loads(data) if data else {}
  except ValueError:
    return {}


def cookie_rows(data: bytes | None) -> list[tuple] | None:
  if not data:
    return None
  db = sqlite3.connect(":memory:")
  try:
    db.deserialize(data)
    return db.execute("SELECT * FROM cookies").fetchall()
  except sqlite3.DatabaseError:
    return None
  finally:
    db.close()


def get(read_file: Callable[[str], bytes | None], list_dir: Callable[[str], list[str] | None], kind: str) -> Any:
  if kind == "chrome_font_size":
    return _json(read_file(f"{PROFILE}/Default/Preferences")).get("webkit", {}).get("webprefs", dict(DEFAULT_WEBPREFS))
  if kind == "data_delete_automacally":
    prefs = _json(read_file(f"{PROFILE}/Default/Preferences"))
    return "true" if prefs.get("profile", {}).get("default_content_setting_values") is not None else "false"
  if kind == "enabled_experiments":
    return _json(read_file(f"{PROFILE}/Local State")).get("browser", {}).get("enabled_labs_experiments", [])
  if kind == "cookie_data":
    return cookie_rows(read_file(f"{PROFILE}/Default/Cookies"))
  if kind == "shortcuts_on_desktop":
    names = [n for n in list_dir("/home/user/Desktop") or [] if n.endswith(".desktop")]
    return {n: (read_file(f"/home/user/Desktop/{n}") or b"").decode("utf-8", "replace") for n in names}
  raise ValueError(f"unknown Chrome profile getter {kind!r}")


GETTERS = ("chrome_font_size", "data_delete_automacally", "enabled_experiments", "cookie_data", "shortcuts_on_desktop")


def check_font_size(result: Any, rules: dict, **_) -> float:
  size = (result or {}).get("default_font_size")
  if size is None:
    return 0.0
  if rules["type"] == "value":
    return float(size == rules["value"])
  if rules["type"] == "range":
    return float(rules["min"] < size < rules["max"])
  raise ValueError(f"check_font_size: unknown rule type {rules['type']!r}")


def check_enabled_experiments(result: Any, rules: dict, **_) -> float:
  if rules["type"] != "names":
    raise ValueError(f"check_enabled_experiments: unknown rule type {rules['type']!r}")
  return float([e.split("@")[0] for e in result or []] == rules["names"])


def is_cookie_deleted(result: Any, rules: dict, **_) -> float:
  if rules["type"] != "domains":
    raise ValueError(f"is_cookie_deleted: unknown rule type {rules['type']!r}")
  if result is None:   # no readable cookie database: OSWorld's check fails on it
    return 0.0
  hosts = {normalize_url(str(row[1])) for row in result}
  return float(not any(normalize_url(d) in hosts for d in rules["domains"]))


def is_shortcut_on_desktop(result: Any, rules: dict, **_) -> float:
  if rules["type"] != "name":
    raise ValueError(f"is_shortcut_on_desktop: unknown rule type {rules['type']!r}")
  return float(any(f"Name={rules['name']}\n" in text for text in (result or {}).values()))


NAMES = ("check_font_size", "check_enabled_experiments", "is_cookie_deleted", "is_shortcut_on_desktop")
