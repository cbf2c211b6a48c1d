"""SQLite: query, modify, change the schema, import and export databases."""
from __future__ import annotations

import collections

from mage_jax.forge.skills.base import CATEGORIES, CITIES, ITEMS, NAMES, bash, capability, define, distinct, domain, package, py

domain("sqlite", "SQLite databases: queries, row changes, schema changes, import and export")
capability("sqlite.query", "Answer questions with SQL")
capability("sqlite.modify", "Insert, update and delete rows")
capability("sqlite.schema", "Create tables, columns and indexes")
capability("sqlite.transfer", "Move data between a database and CSV or JSON")
A = ("sqlite",)
DB = "shop.db"


def _orders(r, n=10):
  return [[i + 1, r.choice(NAMES[:5]), r.choice(ITEMS[:5]), r.randint(1, 9), r.randint(2, 40)] for i in range(n)]


def _sample(r):
  return {"orders": _orders(r)}


def _db(p, extra=None):
  tables = {"orders": {"columns": ["id INTEGER PRIMARY KEY", "customer TEXT", "item TEXT", "qty INTEGER", "price INTEGER"],
                       "rows": p["orders"]}, **(extra or {})}
  return [{"type": "sqlite", "path": DB, "tables": tables}]


def _sql(q):
  return bash(f"sqlite3 {DB} \"{q}\"", "Query with sqlite3")


def _pysql(code):
  return py(f"import sqlite3\ncon = sqlite3.connect('{DB}')\n{code}\ncon.commit()", "Use Python's sqlite3")


def _q(query, rows, path=DB):
  return {"type": "sqlite_query", "path": path, "query": query, "rows": rows}


def _answer(v):
  return {"type": "terminal_answer", "text": str(v)}


def _mention(p):
  return {DB: [p["orders"][0][1]]}


def _totals(orders):
  tot = collections.Counter()
  for o in orders:
    tot[o[1]] += o[3]
  return tot


def _top(orders):
  return _totals(orders).most_common(1)[0][0]


def sk(id, desc, build, sample=_sample, apps=A):
  define(id, desc, sample, build, apps=apps, mentions=_mention if sample is _sample else None)


# ---- query -------------------------------------------------------------------------------------
sk("sqlite.query.count_where", "Count the rows that match a condition",
   lambda p: package(f"How many orders in {DB} are for {p['item']}? Print just the number as your last command's output.",
                     _db(p), _answer(sum(o[2] == p["item"] for o in p["orders"])),
                     [_pysql("print(con.execute('SELECT COUNT(*) FROM orders').fetchone()[0])")],
                     terminal=[_pysql(f"print(con.execute(\"SELECT COUNT(*) FROM orders WHERE item = '{p['item']}'\").fetchone()[0])")]),
   sample=lambda r: {"orders": _orders(r), "item": ITEMS[0]})

sk("sqlite.query.revenue_of_customer", "Sum an expression over one customer's rows",
   lambda p: package(f"What is the total revenue (sum of qty * price) of the orders by {p['who']} in {DB}? Print just the "
                     "number as your last command's output.", _db(p),
                     _answer(sum(o[3] * o[4] for o in p["orders"] if o[1] == p["who"])),
                     [_pysql(f"print(con.execute(\"SELECT SUM(qty) FROM orders WHERE customer = '{p['who']}'\").fetchone()[0])")],
                     terminal=[_pysql(f"print(con.execute(\"SELECT SUM(qty * price) FROM orders WHERE customer = '{p['who']}'\").fetchone()[0])")]),
   sample=lambda r: (lambda o: {"orders": o, "who": o[0][1]})(_orders(r)))

sk("sqlite.query.top_group", "Find the group with the largest total",
   lambda p: package(f"Which customer in {DB} ordered the largest total qty? Print just the name as your last command's "
                     "output.", _db(p), _answer(p["top"]),
                     [_pysql("print(con.execute('SELECT customer FROM orders GROUP BY customer ORDER BY SUM(qty) LIMIT 1').fetchone()[0])")],
                     terminal=[_pysql("print(con.execute('SELECT customer FROM orders GROUP BY customer ORDER BY SUM(qty) DESC LIMIT 1')"
                                      ".fetchone()[0])")]),
   sample=lambda r: (lambda o: {"orders": o, "top": _top(o)})(_orders(r) + [[11, "Zoe", "pen", 40, 3]]))


sk("sqlite.query.join_two_tables", "Answer a question that needs a join of two tables",
   lambda p: package(f"In {DB}, customers(name, city) says where each customer lives. How many orders come from customers "
                     f"living in {p['city']}? Print just the number as your last command's output.",
                     _db(p, {"customers": {"columns": ["name TEXT", "city TEXT"], "rows": p["customers"]}}),
                     _answer(sum(dict(map(tuple, p["customers"]))[o[1]] == p["city"] for o in p["orders"])),
                     [_pysql("print(con.execute('SELECT COUNT(*) FROM customers').fetchone()[0])")],
                     terminal=[_pysql(f"print(con.execute(\"SELECT COUNT(*) FROM orders o JOIN customers c ON o.customer = c.name "
                                      f"WHERE c.city = '{p['city']}'\").fetchone()[0])")]),
   sample=lambda r: {"orders": _orders(r), "customers": [[n, c] for n, c in zip(NAMES[:5], [CITIES[0], CITIES[1]] * 3)],
                     "city": CITIES[0]})

sk("sqlite.query.distinct_to_file", "Write the distinct values of a column, sorted, to a file",
   lambda p: package(f"Write the distinct items ordered in {DB}, sorted alphabetically, one per line, to items.txt.", _db(p),
                     {"type": "file_text", "path": "items.txt", "equals": "\n".join(sorted({o[2] for o in p["orders"]}))},
                     [_pysql("open('items.txt', 'w').write('\\n'.join(r[0] for r in con.execute('SELECT item FROM orders')))")],
                     terminal=[_pysql("open('items.txt', 'w').write('\\n'.join(r[0] for r in con.execute("
                                      "'SELECT DISTINCT item FROM orders ORDER BY item')))")]), apps=("sqlite", "text"))

# ---- modify ------------------------------------------------------------------------------------
_ALL = "SELECT id, customer, item, qty, price FROM orders ORDER BY id"

sk("sqlite.modify.insert_row", "Insert one row with given values",
   lambda p: package(f"Add an order to {DB}: id {len(p['orders']) + 1}, customer {p['who']}, item stamp, qty 3, price 12.",
                     _db(p), _q(_ALL, p["orders"] + [[len(p["orders"]) + 1, p["who"], "stamp", 3, 12]]),
                     [_pysql(f"con.execute(\"INSERT INTO orders VALUES ({len(p['orders']) + 1}, '{p['who']}', 'stamp', 3, 21)\")")],
                     terminal=[_pysql(f"con.execute(\"INSERT INTO orders VALUES ({len(p['orders']) + 1}, '{p['who']}', 'stamp', 3, 12)\")")]),
   sample=lambda r: {"orders": _orders(r), "who": r.choice(NAMES[10:])})

sk("sqlite.modify.raise_prices", "Update a column for the rows that match a condition",
   lambda p: package(f"In {DB} add 5 to the price of every {p['item']} order.", _db(p),
                     _q(_ALL, [o[:4] + [o[4] + 5 * (o[2] == p["item"])] for o in p["orders"]]),
                     [_pysql("con.execute('UPDATE orders SET price = price + 5')")],
                     terminal=[_pysql(f"con.execute(\"UPDATE orders SET price = price + 5 WHERE item = '{p['item']}'\")")]),
   # the item is one some order has: a fixed item missing from a draw (1 in 9 draws) left nothing to
   # change, so the untouched database already scored 1 (found by chaining the skill)
   sample=lambda r: (lambda o: {"orders": o, "item": r.choice(o)[2]})(_orders(r)))

sk("sqlite.modify.delete_small", "Delete the rows below a threshold",
   lambda p: package(f"Delete every order with qty below {p['min']} from {DB}.", _db(p),
                     _q(_ALL, [o for o in p["orders"] if o[3] >= p["min"]]),
                     [_pysql(f"con.execute('DELETE FROM orders WHERE qty <= {p['min']}')")],
                     terminal=[_pysql(f"con.execute('DELETE FROM orders WHERE qty < {p['min']}')")]),
   sample=lambda r: (lambda o: {"orders": o + [[len(o) + 1, "Ada", "pen", 4, 9]], "min": 4})(_orders(r)))

# ---- schema ------------------------------------------------------------------------------------
sk("sqlite.schema.create_table", "Create a table with given columns and rows",
   lambda p: package(f"In {DB} create a table suppliers with columns name (TEXT) and city (TEXT) and insert these rows: "
                     + "; ".join(f"{n} in {c}" for n, c in p["rows"]) + ".", _db(p),
                     _q("SELECT name, city FROM suppliers ORDER BY name", sorted(p["rows"])),
                     [_pysql("con.execute('CREATE TABLE suppliers (name TEXT, city TEXT)')")],
                     terminal=[_pysql("con.execute('CREATE TABLE suppliers (name TEXT, city TEXT)')\n"
                                      f"con.executemany('INSERT INTO suppliers VALUES (?, ?)', {p['rows']!r})")]),
   sample=lambda r: {"orders": _orders(r, 3), "rows": [[n + " Ltd", c] for n, c in zip(distinct(r, NAMES, 3), distinct(r, CITIES, 3))]})

sk("sqlite.schema.add_column_filled", "Add a column and fill it from the other columns",
   lambda p: package(f"In {DB} add an INTEGER column total to orders and set it to qty * price in every row.", _db(p),
                     _q("SELECT id, total FROM orders ORDER BY id", [[o[0], o[3] * o[4]] for o in p["orders"]]),
                     [_pysql("con.execute('ALTER TABLE orders ADD COLUMN total INTEGER')\ncon.execute('UPDATE orders SET total = qty')")],
                     terminal=[_pysql("con.execute('ALTER TABLE orders ADD COLUMN total INTEGER')\n"
                                      "con.execute('UPDATE orders SET total = qty * price')")]))

sk("sqlite.schema.create_index", "Create a named index on a column",
   lambda p: package(f"In {DB} create an index named idx_orders_customer on the customer column of orders.", _db(p),
                     _q("SELECT il.name, ii.name FROM pragma_index_list('orders') il, pragma_index_info(il.name) ii",
                        [["idx_orders_customer", "customer"]]),
                     [_sql("CREATE INDEX idx_orders_customer ON orders(item)")],
                     terminal=[_pysql("con.execute('CREATE INDEX idx_orders_customer ON orders(customer)')")]))

# ---- transfer ----------------------------------------------------------------------------------
sk("sqlite.transfer.export_csv", "Export a query's result to a CSV file with a header",
   lambda p: package(f"Export the orders of {DB} with qty of at least 5 to big.csv: header id,customer,qty and those rows "
                     "in id order.", _db(p),
                     {"type": "csv_equals", "path": "big.csv", "rows": [["id", "customer", "qty"]] + [[o[0], o[1], o[3]] for o in p["orders"] if o[3] >= 5]},
                     [_pysql("import csv\nw = csv.writer(open('big.csv', 'w', newline=''))\nw.writerow(['id', 'customer', 'qty'])\n"
                             "w.writerows(con.execute('SELECT id, customer, qty FROM orders'))")],
                     terminal=[_pysql("import csv\nw = csv.writer(open('big.csv', 'w', newline=''))\nw.writerow(['id', 'customer', 'qty'])\n"
                                      "w.writerows(con.execute('SELECT id, customer, qty FROM orders WHERE qty >= 5 ORDER BY id'))")]),
   apps=("sqlite", "csv"))

sk("sqlite.transfer.import_csv", "Load a CSV file into a new table",
   lambda p: package(f"Load prices.csv (header item,price) into a new table prices(item TEXT, price INTEGER) in {DB}.",
                     _db(p) + [{"type": "csv", "path": "prices.csv", "rows": [["item", "price"]] + p["prices"]}],
                     _q("SELECT item, price FROM prices ORDER BY item", sorted(p["prices"])),
                     [_pysql("import csv\ncon.execute('CREATE TABLE prices (item TEXT, price INTEGER)')\n"
                             "con.executemany('INSERT INTO prices VALUES (?, ?)', list(csv.reader(open('prices.csv'))))")],
                     terminal=[_pysql("import csv\ncon.execute('CREATE TABLE prices (item TEXT, price INTEGER)')\n"
                                      "con.executemany('INSERT INTO prices VALUES (?, ?)', list(csv.reader(open('prices.csv')))[1:])")]),
   sample=lambda r: {"orders": _orders(r, 3), "prices": [[i, r.randint(1, 50)] for i in distinct(r, ITEMS, 5)]},
   apps=("csv", "sqlite"))

sk("sqlite.transfer.export_json", "Export a grouped query to a JSON object",
   lambda p: package(f"Write qty.json: a JSON object mapping each customer in {DB} to the total qty they ordered.", _db(p),
                     {"type": "json_equals", "path": "qty.json", "expected": dict(_totals(p["orders"]))},
                     [_pysql("import json\njson.dump({c: n for c, n in con.execute('SELECT customer, COUNT(*) FROM orders GROUP BY customer')}, "
                             "open('qty.json', 'w'))")],
                     terminal=[_pysql("import json\njson.dump({c: n for c, n in con.execute('SELECT customer, SUM(qty) FROM orders "
                                      "GROUP BY customer')}, open('qty.json', 'w'))")]), apps=("sqlite", "json"))


sk("sqlite.query.category_report", "Write per-category counts from a joined lookup table to a file",
   lambda p: package(f"In {DB}, kinds(item, category) gives each item's category. Write one line 'category: N' per category "
                     "(sorted by category), N being how many orders fall in it, to report.txt.",
                     _db(p, {"kinds": {"columns": ["item TEXT", "category TEXT"], "rows": p["kinds"]}}),
                     {"type": "file_text", "path": "report.txt", "equals": "\n".join(
                         f"{c}: {n}" for c, n in sorted(collections.Counter(dict(map(tuple, p["kinds"]))[o[2]] for o in p["orders"]).items()))},
                     [_pysql("open('report.txt', 'w').write('\\n'.join(f'{c}: {n}' for c, n in con.execute("
                             "'SELECT category, COUNT(*) FROM kinds GROUP BY category ORDER BY category')))")],
                     terminal=[_pysql("open('report.txt', 'w').write('\\n'.join(f'{c}: {n}' for c, n in con.execute("
                                      "'SELECT k.category, COUNT(*) FROM orders o JOIN kinds k ON o.item = k.item GROUP BY k.category "
                                      "ORDER BY k.category')))")]),
   sample=lambda r: {"orders": _orders(r), "kinds": [[i, r.choice(CATEGORIES[:3])] for i in ITEMS[:5]]}, apps=("sqlite", "text"))
