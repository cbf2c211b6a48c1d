"""LibreOffice's user settings file (registrymodifications.xcu): the values OSWorld's config checks read."""
from __future__ import annotations

from xml.etree import ElementTree

OOR = "{http://openoffice.org/2001/registry}"


def registry_value(xcu: bytes | None, path: str, name: str) -> str | None:
  """The last value of property `name` under item `path` (e.g. /org.openoffice.Office.Common/Save/Document,
  AutoSaveTimeIntervall); None when unset or the file is absent or malformed."""
  if not xcu:
    return None
  try:
    root = ElementTree.fromstring(xcu)
  except ElementTree.ParseError:
    return None
  value = None
  for item in root.iter("item"):
    if item.get(f"{OOR}path") == path:
      for prop in item.iter("prop"):
        if prop.get(f"{OOR}name") == name:
          for v in prop.iter("value"):
            value = v.text
  return value
