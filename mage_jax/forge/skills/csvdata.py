"""CSV: aggregate, filter, transform, join, look up, convert and validate tabular text."""
from __future__ import annotations

import collections

from mage_jax.forge.skills.base import (CATEGORIES, CITIES, ITEMS, NAMES, against_order, bash, capability, csv_text, define, distinct,
                                        domain, package, py)

domain("csv", "Comma-separated tables: aggregate, filter, transform, join, look up, convert, validate")
capability("csv.aggregate", "Group and summarise rows")
capability("csv.filter", "Select rows or columns")
capability("csv.transform", "Sort, rename, de-duplicate and derive columns")
capability("csv.join", "Combine two tables on a key")
capability("csv.lookup", "Answer a question about one row in the shell")
capability("csv.convert", "Convert between CSV and other text formats")
capability("csv.validate", "Find malformed rows")
A = ("csv",)


def _sales(r, n=8):
  return [["category", "amount"]] + [[r.choice(CATEGORIES[:4]), r.randint(1, 60)] for _ in range(n)]


def _items(r, n=6):
  return [["item", "qty", "price"]] + [[it, r.randint(1, 20), r.randint(2, 40)] for it in distinct(r, ITEMS, n)]


def _csv(path, rows):
  return [{"type": "csv", "path": path, "rows": rows}]


def _eq(path, rows):
  return {"type": "csv_equals", "path": path, "rows": rows}


def _pd(code):
  return py("import pandas as pd\n" + code, "Use pandas")


def _head(path, rows):
  return lambda p: {path: [str(c) for c in rows(p)[0]]}


# ---- aggregate ---------------------------------------------------------------------------------
def _group_sum(rows):
  tot = collections.defaultdict(int)
  for c, a in rows[1:]:
    tot[c] += a
  return [["category", "total"]] + [[c, tot[c]] for c in sorted(tot)]


define("csv.aggregate.group_sum", "Sum a numeric column per category into a new CSV",
       lambda r: {"rows": _sales(r)},
       lambda p: package("From sales.csv write totals.csv with header category,total and one row per category (sorted "
                         "by category) holding the sum of its amounts.", _csv("sales.csv", p["rows"]),
                         _eq("totals.csv", _group_sum(p["rows"])),
                         [_pd("d = pd.read_csv('sales.csv')\nd.groupby('category').amount.max().rename('total').to_csv('totals.csv')")],
                         terminal=[_pd("d = pd.read_csv('sales.csv')\nd.groupby('category').amount.sum().rename('total').to_csv('totals.csv')")]),
       apps=A, mentions=_head("sales.csv", lambda p: p["rows"]))

define("csv.aggregate.count_per_value", "Count rows per value of a column",
       lambda r: {"rows": [["name", "city"]] + [[n, c] for n, c in zip(distinct(r, NAMES, 9), CITIES[:2] + r.choices(CITIES[:3], k=7))]},
       lambda p: package("From people.csv write counts.csv with header city,count and one row per city (sorted by city) "
                         "holding how many people live there.", _csv("people.csv", p["rows"]),
                         _eq("counts.csv", [["city", "count"]] + sorted(
                             [c, n] for c, n in collections.Counter(r[1] for r in p["rows"][1:]).items())),
                         [_pd("d = pd.read_csv('people.csv')\nd.groupby('city').size().sort_index(ascending=False).rename('count').to_csv('counts.csv')")],
                         terminal=[_pd("d = pd.read_csv('people.csv')\nd.groupby('city').size().rename('count').to_csv('counts.csv')")]),
       apps=A)

define("csv.aggregate.column_mean", "Print the mean of a column rounded to two decimals",
       lambda r: {"rows": _items(r, 7)},
       lambda p: package("Print the mean of the price column of stock.csv, rounded to 2 decimals (like 12.50), as your "
                         "last command's output.", _csv("stock.csv", p["rows"]),
                         {"type": "terminal_answer", "text": f"{sum(r[2] for r in p['rows'][1:]) / (len(p['rows']) - 1):.2f}"},
                         [_pd("print(f\"{pd.read_csv('stock.csv').qty.mean():.2f}\")")],
                         terminal=[_pd("print(f\"{pd.read_csv('stock.csv').price.mean():.2f}\")")]), apps=A)

# ---- filter ------------------------------------------------------------------------------------
define("csv.filter.rows_above", "Keep the rows whose number exceeds a threshold",
       lambda r: (lambda rows: {"rows": rows[:3] + [[rows[3][0], 10, rows[3][2]]] + rows[4:], "limit": 10})(_items(r, 8)),
       lambda p: package(f"Write bulk.csv with the header and the rows of stock.csv whose qty is "
                         f"greater than {p['limit']}, in their original order.", _csv("stock.csv", p["rows"]),
                         _eq("bulk.csv", p["rows"][:1] + [r for r in p["rows"][1:] if r[1] > p["limit"]]),
                         [_pd(f"d = pd.read_csv('stock.csv')\nd[d.qty >= {p['limit']}].to_csv('bulk.csv', index=False)")],
                         terminal=[_pd(f"d = pd.read_csv('stock.csv')\nd[d.qty > {p['limit']}].to_csv('bulk.csv', index=False)")]),
       apps=A)

define("csv.filter.select_columns", "Keep only some columns, in a given order",
       lambda r: {"rows": _items(r, 5)},
       lambda p: package("Write prices.csv holding only the price and item columns of stock.csv, in that order "
                         "(price first).", _csv("stock.csv", p["rows"]), _eq("prices.csv", [[r[2], r[0]] for r in p["rows"]]),
                         [bash("cut -d, -f1,3 stock.csv > prices.csv")],
                         terminal=[bash("awk -F, -v OFS=, '{print $3, $1}' stock.csv > prices.csv")]), apps=A)

# ---- transform ---------------------------------------------------------------------------------
define("csv.transform.sort_by_number", "Sort rows by a numeric column, largest first",
       lambda r: {"rows": [["name", "score"]] + [[n, s] for n, s in zip(distinct(r, NAMES, 7), against_order(r.sample(range(10, 99), 7), largest_first=True))]},
       lambda p: package("Write ranking.csv: scores.csv with its rows sorted by score, highest first (header kept).",
                         _csv("scores.csv", p["rows"]), _eq("ranking.csv", p["rows"][:1] + sorted(p["rows"][1:], key=lambda r: -r[1])),
                         [_pd("pd.read_csv('scores.csv').sort_values('score').to_csv('ranking.csv', index=False)")],
                         terminal=[_pd("pd.read_csv('scores.csv').sort_values('score', ascending=False).to_csv('ranking.csv', index=False)")]),
       apps=A)

define("csv.transform.computed_column", "Add a column computed from two others",
       lambda r: {"rows": _items(r, 5)},
       lambda p: package("Write valued.csv: stock.csv with a fourth column named value equal to qty * price.",
                         _csv("stock.csv", p["rows"]), _eq("valued.csv", [p["rows"][0] + ["value"]] + [r + [r[1] * r[2]] for r in p["rows"][1:]]),
                         [_pd("d = pd.read_csv('stock.csv'); d['value'] = d.qty + d.price; d.to_csv('valued.csv', index=False)")],
                         terminal=[_pd("d = pd.read_csv('stock.csv'); d['value'] = d.qty * d.price; d.to_csv('valued.csv', index=False)")]),
       apps=A)

define("csv.transform.rename_header", "Rename the columns of a CSV in place",
       lambda r: {"rows": _items(r, 4), "new": ["product", "count", "unit_price"]},
       lambda p: package("In stock.csv rename the columns item, qty, price to " + ", ".join(p["new"]) +
                         " (in place, data unchanged).", _csv("stock.csv", p["rows"]), _eq("stock.csv", [p["new"]] + p["rows"][1:]),
                         [bash(f"sed -i '1s/item/{p['new'][0]}/' stock.csv")],
                         terminal=[bash(f"sed -i '1s/.*/{','.join(p['new'])}/' stock.csv")]), apps=A)

define("csv.transform.drop_duplicates", "Remove duplicate rows, keeping the first",
       lambda r: {"rows": [["id", "name"]] + [[i % 5, NAMES[i % 5]] for i in r.sample(range(9), 9)]},
       lambda p: package("Write dedup.csv: contacts.csv without repeated rows (keep each row's first occurrence, header "
                         "kept, order kept).", _csv("contacts.csv", p["rows"]),
                         _eq("dedup.csv", [list(x) for x in dict.fromkeys(tuple(r) for r in p["rows"])]),
                         [bash("sort -u contacts.csv > dedup.csv")], terminal=[bash("awk '!seen[$0]++' contacts.csv > dedup.csv")]),
       apps=A)

# ---- join, lookup ------------------------------------------------------------------------------
def _join_params(r):
  items = distinct(r, ITEMS, 5)
  return {"stock": [["item", "qty"]] + [[i, r.randint(1, 9)] for i in items],
          "prices": [["item", "price"]] + [[i, r.randint(2, 30)] for i in reversed(items)]}


define("csv.join.on_key", "Join two CSV files on a shared key column",
       _join_params,
       lambda p: package("Join stock.csv and prices.csv on item into joined.csv with header item,qty,price, rows in "
                         "stock.csv's order.", _csv("stock.csv", p["stock"]) + _csv("prices.csv", p["prices"]),
                         _eq("joined.csv", [["item", "qty", "price"]] + [
                             [i, q, dict(map(tuple, p["prices"][1:]))[i]] for i, q in p["stock"][1:]]),
                         [bash("paste -d, stock.csv <(cut -d, -f2 prices.csv) > joined.csv")],
                         terminal=[_pd("pd.read_csv('stock.csv').merge(pd.read_csv('prices.csv'), on='item', how='left')"
                                       ".to_csv('joined.csv', index=False)")]), apps=A)

define("csv.lookup.value_for_key", "Print one cell found by its row key",
       lambda r: {"rows": _items(r, 8), "pick": r.randint(1, 8)},
       lambda p: package(f"What is the price of {p['rows'][p['pick']][0]} in stock.csv? Print just the number as your last "
                         "command's output.", _csv("stock.csv", p["rows"]),
                         {"type": "terminal_answer", "text": str(p["rows"][p["pick"]][2])},
                         [bash(f"grep '^{p['rows'][p['pick']][0]},' stock.csv | cut -d, -f2")],
                         terminal=[bash(f"grep '^{p['rows'][p['pick']][0]},' stock.csv | cut -d, -f3")]), apps=A)

# ---- convert, validate -------------------------------------------------------------------------
define("csv.convert.tsv_to_csv", "Convert a tab-separated file to CSV",
       lambda r: {"rows": _items(r, 4)},
       lambda p: package("Convert stock.tsv (tab-separated) to stock.csv (comma-separated).",
                         [{"type": "text", "path": "stock.tsv", "content": csv_text(p["rows"], "\t")}], _eq("stock.csv", p["rows"]),
                         [bash("tr '\\t' ';' < stock.tsv > stock.csv")], terminal=[bash("tr '\\t' ',' < stock.tsv > stock.csv")]),
       apps=A)

define("csv.convert.to_json_records", "Convert a CSV into a JSON list of records", lambda r: {"rows": _items(r, 4)},
       lambda p: package("Convert stock.csv into stock.json: a JSON list with one object per row, keys item, qty, price "
                         "(qty and price as numbers).", _csv("stock.csv", p["rows"]),
                         {"type": "json_equals", "path": "stock.json",
                          "expected": [dict(zip(p["rows"][0], r)) for r in p["rows"][1:]]},
                         [_pd("pd.read_csv('stock.csv', dtype=str).to_json('stock.json', orient='records')")],
                         terminal=[_pd("pd.read_csv('stock.csv').to_json('stock.json', orient='records')")]),
       apps=("csv", "json"))

define("csv.validate.count_incomplete", "Count the rows that have an empty field",
       lambda r: {"rows": [["name", "email", "city"]] + [[n, f"{n.lower()}@x.org" if r.random() < .6 else "",
                                                           r.choice(CITIES) if r.random() < .7 else ""] for n in distinct(r, NAMES, 9)]
                  + [["Zed", "", "Oslo"], ["Yan", "yan@x.org", ""]]},
       lambda p: package("How many data rows of signup.csv have at least one empty field? Print just the number as your "
                         "last command's output.", _csv("signup.csv", p["rows"]),
                         {"type": "terminal_answer", "text": str(sum(1 for r in p["rows"][1:] if "" in r))},
                         [bash("grep -c ',,' signup.csv")], terminal=[bash("tail -n +2 signup.csv | grep -cE '(^,|,,|,$)'")]),
       apps=A)
