"""OSWorld's rule-based metrics over JSON, URLs, tabs and app config files (our code, OSWorld's semantics).

  check_direct_json_object   result (a dict, or JSON text where ' stands for ") against rules.expected:
                             every expected key equal; with rules.expect_in_result, a string value must
                             be a substring of the result's, a list value needs one of its items in the
                             result's list
  is_expected_url_pattern_match  every regex of rules.expected found in the URL (a str, or a tab
                             info's `url`)
  is_expected_active_tab     rules {type: "url", url}: the active tab's URL equals it after
                             normalisation (scheme defaults to http, host lowercased without "www.",
                             a lone "/" path dropped)
  is_expected_tabs           rules {type: "url", urls}: as many open tabs as urls, each url matching
                             one tab after the normalisation above
  check_csv                  a CSV file's rows (by header): each rules.expect {column: value} matches some
                             row, no rules.unexpect pattern matches any
  check_json                 a JSON file: each rules.expect {key: [path...], method, ref} reaches its value
                             (a missing key fails) and it matches the value rule
                             (table_metrics.match_rule); no rules.unexpect one matches. (OSWorld's
                             is_yaml option is refused at import: YAML is not a dependency here.)
  compare_config             the file's whole text equals rules.expected
  is_expected_bookmarks      Chromium's bookmark roots: rules.type bookmark_bar_folders_names (the bar's
                             folder names as a set), bookmark_bar_websites_urls (the bar's URLs as a set),
                             liked_authors_websites_urls (the "Liked Authors" folder's URLs equal one
                             choice per rules.urls entry, a string or a list of alternatives)
  check_thunderbird_prefs    a prefs.js (`user_pref("key", JSON value);` lines): every rules.expect
                             {key: value rule} key is present with a matching value, no rules.unexpect
                             {key: value rule} matches
  check_thunderbird_filter   a msgFilterRules.dat: filters as `name=`, `enabled=`, `type=`, `action=`,
                             `actionValue=`, `condition=` lines (quoted values; a filter counts once
                             its condition line is read, the last action line wins, the condition is
                             split into its `AND|OR (field,op,value)` and `ALL` terms); every
                             rules.expect record ({field: value}, all equal) matches some filter, no
                             rules.unexpect record matches any
  is_extension_installed     rules {type: contain | not_contain, expected}: a substring of the output
  check_config_status        a GIMP-style config file `(key ... value)` lines: one line whose first
                             item is rules.key (or whose first two are the two keys of a list) and whose
                             last item is rules.value
"""
from __future__ import annotations

import csv
import io
import itertools
import json
import re
from typing import Any
from urllib.parse import urlparse, urlunparse

from mage_jax.tasks.osworld.table_metrics import match_rule


def _text(b: Any) -> str | None:
  return b.decode("utf-8", errors="replace") if isinstance(b, bytes) else b


def check_direct_json_object(result: Any, rules: dict, **_) -> float:
  if isinstance(result, (str, bytes)):
    try:
      result = json.loads(_text(result).strip().replace("'", '"'))
    except json.JSONDecodeError:
      return 0.0
  if not isinstance(result, dict):
    return 0.0
  expected = rules["expected"]
  if not rules.get("expect_in_result", False):
    return float(all(result.get(k) == v for k, v in expected.items()))
  for k, v in expected.items():
    got = result.get(k)
    if isinstance(v, list):
      if not (isinstance(got, list) and any(x in got for x in v)):
        return 0.0
    elif isinstance(v, str):
      if not isinstance(got, str) or v not in got:
        return 0.0
    else:
      return 0.0
  return 1.0


def _url(result: Any) -> str | None:
  return result.get("url") if isinstance(result, dict) else _text(result)


def is_expected_url_pattern_match(result: Any, rules: dict, **_) -> float:
  url = _url(result) if result else None
  return float(bool(url) and all(re.search(p, url) for p in rules["expected"]))


def normalize_url(url: str) -> str:
  u = urlparse(url)
  return urlunparse(u._replace(scheme=(u.scheme or "http").lower(), netloc=u.netloc.lower().replace("www.", ""),
                               path="" if u.path == "/" else u.path))


def is_expected_active_tab(result: Any, rules: dict, **_) -> float:
  url = _url(result) if result else None
  if not url or rules.get("type") != "url":
    return 0.0
  return float(normalize_url(url) == normalize_url(rules["url"]))


def is_expected_tabs(result: Any, rules: dict, **_) -> float:
  if not isinstance(result, list) or rules.get("type") != "url":
    return 0.0
  got = [normalize_url(t.get("url", "")) for t in result]
  want = [normalize_url(u) for u in rules["urls"]]
  return float(len(got) == len(want) and all(u in got for u in want))


def check_csv(result: Any, rules: dict, **_) -> float:
  text = _text(result)
  if text is None:
    return 0.0
  rows = list(csv.DictReader(io.StringIO(text)))
  match = lambda pattern, row: all(k in row and row[k] == v for k, v in pattern.items())
  return float(all(any(match(p, r) for r in rows) for p in rules.get("expect", []))
               and not any(match(p, r) for p in rules.get("unexpect", []) for r in rows))


def check_json(result: Any, rules: dict, **_) -> float:
  text = _text(result)
  if text is None:
    return 0.0
  try:
    data = json.loads(text)
  except json.JSONDecodeError:
    return 0.0

  def reach(path):
    value = data
    for k in path:
      value = value[k]
    return value
  for r in rules.get("expect", []):
    try:
      value = reach(r["key"])
    except (KeyError, IndexError, TypeError):
      return 0.0
    if not match_rule(value, r):
      return 0.0
  for r in rules.get("unexpect", []):
    try:
      value = reach(r["key"])
    except (KeyError, IndexError, TypeError):
      value = None
    if match_rule(value, r):
      return 0.0
  return 1.0


def compare_config(result: Any, rules: dict, **_) -> float:
  text = _text(result)
  return float(bool(text) and text == rules["expected"])


def is_expected_bookmarks(result: Any, rules: dict, **_) -> float:
  if not result:
    return 0.0
  bar = (result.get("bookmark_bar") or {}).get("children", [])
  t = rules["type"]
  if t == "bookmark_bar_folders_names":
    return float({b.get("name") for b in bar if b.get("type") == "folder"} == set(rules["names"]))
  if t == "bookmark_bar_websites_urls":
    return float({b.get("url") for b in bar if b.get("type") == "url"} == set(rules["urls"]))
  if t == "liked_authors_websites_urls":
    folder = next((b for b in bar if b.get("type") == "folder" and b.get("name") == "Liked Authors"), None)
    if folder is None:
      return 0.0
    urls = {b.get("url") for b in folder.get("children", []) if b.get("type") == "url"}
    choices = [[u] if isinstance(u, str) else u for u in rules["urls"]]
    return float(any(set(c) == urls for c in itertools.product(*choices)))
  raise ValueError(f"is_expected_bookmarks: unknown rule type {t!r}")


_PREF = re.compile(r'^user_pref\("(?P<key>(?:[^"]|\\")+)", (?P<val>.+)\);$')


def check_thunderbird_prefs(result: Any, rules: dict, **_) -> float:
  text = _text(result)
  if text is None:
    return 0.0
  expect, unexpect = rules.get("expect", {}), rules.get("unexpect", {})
  seen = {k: False for k in expect}
  for line in text.splitlines():
    m = _PREF.match(line.strip())
    if m is None:
      continue
    try:
      value = json.loads(m["val"])
    except json.JSONDecodeError:
      continue
    if m["key"] in expect:
      seen[m["key"]] = match_rule(value, expect[m["key"]])
    elif m["key"] in unexpect and match_rule(value, unexpect[m["key"]]):
      return 0.0
  return float(all(seen.values()))


_FILTER_FIELDS = ("name", "enabled", "type", "action", "actionValue", "condition")
_CONDITION = re.compile(r"""\b(?:AND|OR) \((?:[\w ]+),(?:[\w ']+),(?:"(?:(?:[^"]|\")+)"|(?:[^)]+))\)|\bALL\b""")


def thunderbird_filters(text: str) -> list[dict[str, Any]]:
  filters, current = [], {}
  for line in text.splitlines():
    key, eq, value = line.partition("=")
    if not eq or key not in _FILTER_FIELDS:
      continue
    value = value.strip()
    value = value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value
    value = value.replace('\\"', '"').replace("\\\\", "\\")
    if key == "name":
      current = {"name": value}
    elif key == "condition":
      current["condition"] = _CONDITION.findall(value)
      filters.append(current)
    else:
      current[key] = value
  return filters


def check_thunderbird_filter(result: Any, rules: dict, **_) -> float:
  text = _text(result)
  if text is None:
    return 0.0
  filters = thunderbird_filters(text)
  match = lambda record, f: all(k in f and f[k] == v for k, v in record.items())
  return float(all(any(match(r, f) for f in filters) for r in rules.get("expect", [])) and
               not any(match(r, f) for r in rules.get("unexpect", []) for f in filters))


def is_extension_installed(result: Any, rules: dict, **_) -> float:
  text = _text(result)
  if text is None:
    return 0.0
  if rules["type"] == "contain":
    return float(rules["expected"] in text)
  if rules["type"] == "not_contain":
    return float(rules["expected"] not in text)
  raise ValueError(f"is_extension_installed: unknown rule type {rules['type']!r}")


def check_config_status(result: Any, rules: dict, **_) -> float:
  text = _text(result)
  if text is None:
    return 0.0
  key, value = rules["key"], rules["value"]
  for line in text.splitlines():
    if not line.strip() or line.startswith("#"):
      continue
    items = line.strip().lstrip("(").rstrip(")").split()
    if not items:
      continue
    if isinstance(key, str) and items[0] == key and items[-1] == value:
      return 1.0
    if isinstance(key, list) and len(key) == 2 and items[:2] == key and items[-1] == value:
      return 1.0
  return 0.0
