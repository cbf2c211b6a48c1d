"""OSWorld's Chrome tab getters, read from our Chromium through its DevTools protocol.

OSWorld reads the active tab's URL from the accessibility tree's address bar (which shows the URL
without "https://" and "www.", so its tasks give a `goto_prefix` to put back) and the page through
Playwright over CDP. Here the OSWorld browser preparer starts Chromium with
`--remote-debugging-port=DEVTOOLS_PORT` and `devtools.py` runs in the sandbox:
  active_url_from_accessTree  goto_prefix (default "https://") + the active tab's URL without its
                              scheme and a leading "www." (what the address bar shows)
  active_tab_info             {title, url, content}: the active tab as it is (OSWorld reloads the URL
                              in a new page; we read the open one: no network needed)
  active_tab_url_parse        the active URL's query parameters `parse_keys` (first value, "" if
                              absent), renamed by `replace`
  active_tab_html_parse       texts from the active tab's DOM by `category`: class (class_singleObject
                              {class: key}, class_multiObject {class: {index: key}}), xpath
                              (xpathObject {xpath: key}), input (inputObject {xpath: key}: the value),
                              label (labelObject {text: key}: the first element containing the text)
  url_dashPart                the active URL (with goto_prefix) split on "/", part `partIndex`, without
                              its query when `needDeleteId`; a string, or {key: part} for returnType json
  open_tabs_info              [{title, url}] of every tab
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse

DEVTOOLS_PORT = 9222
_CLIENT = os.path.join(os.path.dirname(__file__), "devtools.py")


def _client_source() -> str:
  with open(_CLIENT) as f:
    return f.read()


def _call(run: Callable[[list[str]], str], *args: str) -> Any:
  out = run(["python3", "-c", _client_source(), *args])
  try:
    return json.loads(out)
  except json.JSONDecodeError:   # no browser, no DevTools port: nothing to read (scores 0)
    return None


def address_bar(url: str) -> str:
  bare = url.split("://", 1)[1] if "://" in url else url
  return bare[4:] if bare.startswith("www.") else bare


def html_expression(spec: dict) -> str:
  """A JavaScript expression giving {key: text} for an active_tab_html_parse spec."""
  cat = spec["category"]
  if cat == "class":
    single, multi = spec.get("class_singleObject", {}), spec.get("class_multiObject", {})
    return (f"(() => {{ const out = {{}}; const texts = c => Array.from(document.getElementsByClassName(c))"
            f".map(e => e.textContent.trim());"
            f"for (const [c, m] of Object.entries({json.dumps(multi)})) {{ const t = texts(c);"
            f"  for (const [i, k] of Object.entries(m)) if (t.length > +i) out[k] = t[+i]; }}"
            f"for (const [c, k] of Object.entries({json.dumps(single)})) {{ const t = texts(c);"
            f"  if (t.length) out[k] = t[0]; }} return out; }})()")
  if cat in ("xpath", "input"):
    objs = spec.get("xpathObject" if cat == "xpath" else "inputObject", {})
    read = "e.textContent.trim()" if cat == "xpath" else "(e.value || '').trim()"
    return (f"(() => {{ const out = {{}}; for (const [x, k] of Object.entries({json.dumps(objs)})) {{"
            f"  const e = document.evaluate(x, document, null, XPathResult.FIRST_ORDERED_NODE_TYPE, null)"
            f".singleNodeValue; if (e) out[k] = {read}; }} return out; }})()")
  if cat == "label":
    return (f"(() => {{ const out = {{}}; for (const [t, k] of Object.entries({json.dumps(spec.get('labelObject', {}))})) {{"
            f"  const e = document.evaluate('//*[contains(text(), ' + JSON.stringify(t) + ')]', document, null,"
            f" XPathResult.FIRST_ORDERED_NODE_TYPE, null).singleNodeValue;"
            f"  if (e && e.textContent.trim()) out[k] = e.textContent.trim(); }} return out; }})()")
  raise ValueError(f"active_tab_html_parse: unknown category {cat!r}")


def close_tabs(run: Callable[[list[str]], str], urls: list[str]) -> list[str] | None:
  """OSWorld's chrome_close_tabs: the first tab matching each URL is closed; the closed tabs' ids."""
  return _call(run, "close", str(DEVTOOLS_PORT), *urls)


def get(run: Callable[[list[str]], str], spec: dict) -> Any:
  """`run(argv)` runs a command in the sandbox and returns its output."""
  t = spec["type"]
  tabs = _call(run, "list", str(DEVTOOLS_PORT))
  if not tabs:
    return None
  if t == "open_tabs_info":
    return [{"title": x.get("title"), "url": x.get("url")} for x in tabs]
  url = tabs[0].get("url", "")
  if t == "active_url_from_accessTree":
    return spec.get("goto_prefix", "https://") + address_bar(url)
  if t == "url_dashPart":
    part = (spec.get("goto_prefix", "https://") + address_bar(url)).split("/")[int(spec["partIndex"])]
    part = part.split("?")[0] if spec.get("needDeleteId") else part
    return {spec["key"]: part} if spec.get("returnType") == "json" else part
  if t == "active_tab_url_parse":
    query = parse_qs(urlparse(url).query)
    out = {k: query.get(k, [""])[0] for k in spec["parse_keys"]}
    for old, new in (spec.get("replace") or {}).items():
      out[new] = out.pop(old)
    return out
  if t == "active_tab_info":
    content = _call(run, "eval", str(DEVTOOLS_PORT), "document.documentElement.outerHTML")
    return {"title": tabs[0].get("title"), "url": url, "content": content}
  if t == "active_tab_html_parse":
    return _call(run, "eval", str(DEVTOOLS_PORT), html_expression(spec)) or {}
  raise ValueError(f"unsupported tab getter {t!r}")
