"""OSWorld's `rule_relativeTime` getter: dates relative to today written into the expected rules.

rules.relativeTime {from, to?} names days ("tomorrow", "next Monday", "10th next month", ...);
each is resolved against today and written into rules.expected["time"] (from only) or
rules.expected["from"] / ["to"] by substituting the format fields {DoW} (Mon), {Month} (Jan),
{month} (january), {MonthFull} (January), {DayD} (5), {Day0D} (05), {Month0D} (01), {Year}.
The day rules follow OSWorld's definitions (e.g. "next Monday" is the Monday after this week's,
"next Friday" depends on whether `from` is "next Monday").
"""
from __future__ import annotations

import copy
import datetime as dt
from typing import Any

_DOW = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")


def _next_month_day(now: dt.datetime, day: int) -> dt.datetime:
  return dt.datetime(now.year + (now.month == 12), now.month % 12 + 1, day)


def resolve(name: str, now: dt.datetime, other: str | None = None) -> dt.datetime:
  """The day `name` means, seen from `now`; `other` is the range's `from` when resolving its `to`."""
  wd = now.weekday()
  if name == "tomorrow":
    return now + dt.timedelta(days=1)
  if name == "this month":
    return now
  if name in ("5th next month", "10th next month", "11th next month"):
    return _next_month_day(now, int(name.split("th")[0]))
  if name == "this Saturday":
    return now + dt.timedelta(days=5 - wd)
  if name == "this Sunday":
    return now + dt.timedelta(days=6 - wd)
  if name == "next Monday":
    return now + dt.timedelta(days=7 - wd)
  if name == "next Friday":
    if wd < 4 and other == "next Monday":
      return now + dt.timedelta(days=4 - wd + 7)
    return now + dt.timedelta(days=4 - wd if wd < 4 else 6 - wd + 5)
  if name == "first monday four months later":
    month = (now.month + 4) % 12   # OSWorld's arithmetic, kept as it is (December + 4 gives month 4)
    first = dt.datetime(now.year + (now.month >= 9), month or 12, 1)
    return first + dt.timedelta(days=(7 - first.weekday()) % 7)
  raise ValueError(f"rule_relativeTime: unknown relative day {name!r}")


def fill(fmt: str, day: dt.datetime) -> str:
  for field, value in (("{DoW}", _DOW[day.weekday()]), ("{Month}", _MONTHS[day.month - 1][:3]),
                       ("{DayD}", str(day.day)), ("{Year}", str(day.year)), ("{Month0D}", f"{day.month:02d}"),
                       ("{month}", _MONTHS[day.month - 1].lower()), ("{MonthFull}", _MONTHS[day.month - 1]),
                       ("{Day0D}", f"{day.day:02d}")):
    fmt = fmt.replace(field, value, 1)
  return fmt


def rules(spec: dict[str, Any], now: dt.datetime | None = None) -> dict[str, Any]:
  """The rules of a rule_relativeTime getter spec with its dates filled in (the spec is not changed)."""
  now = now or dt.datetime.now()
  out = copy.deepcopy(spec["rules"])
  rel, expected = out["relativeTime"], out["expected"]
  if "to" not in rel:
    expected["time"] = fill(expected["time"], resolve(rel["from"], now))
  else:
    expected["from"] = fill(expected["from"], resolve(rel["from"], now))
    expected["to"] = fill(expected["to"], resolve(rel["to"], now, other=rel["from"]))
  return out
