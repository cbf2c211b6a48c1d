"""The self-hosted web replicas (a shop and a forum, tasks/web) driven through Chromium, as Forge skills.

The replicas' seed data is fixed (tasks/web/server.py), so a skill draws which products, amounts,
threads and reply texts a task is about. GUI references use the pages' own keyboard paths (each
page autofocuses its search box, quantity field or reply box); hybrid references call the site's
JSON API with curl, as a person with a terminal would. Checkers query the episode's database copy,
which the workload cannot reach except through HTTP. Like the `apps` domain, a gate here takes
~60 s (Chromium and the server start per episode): the full Forge config leaves it out
(`exclude_domains`) and `configs/forge.py:apps` runs it.
"""
from __future__ import annotations

import json
import random
from typing import Any

from mage_jax.forge.skills.base import CITIES, NAMES, WORDS, bash, capability, define, distinct, domain, key, package, type_, wait

domain("web", "Self-hosted web apps in Chromium: a shop and a forum, through the page or their HTTP API")
capability("web.shop", "Find products, fill the cart and place orders in a web shop")
capability("web.forum", "Find threads and post replies in a web forum")
MAX_STEPS = 30

# the replicas' seed rows (tasks/web/server.py SCHEMAS); tests/test_forge_web_apps.py checks they match
PRODUCTS = {"Blue Mug": (1, 899, 12), "Red Mug": (2, 899, 3), "Steel Kettle": (3, 3450, 5), "Tea Towel": (4, 550, 40),
            "Oak Cutting Board": (5, 2999, 7), "Glass Teapot": (6, 2475, 4), "Coffee Grinder": (7, 4999, 2),
            "Espresso Cups (set of 4)": (8, 1899, 9)}   # name -> (id, price in cents, stock)
THREADS = {1: ("Build fails on ARM", "dmitri", 1), 2: ("Welcome to the forum", "admin", 1),
           3: ("Dark mode request", "lena", 2), 4: ("Crash when saving large files", "omar", 1),
           5: ("Release 2.1 schedule", "admin", 1)}   # id -> (title, author, posts)
SEARCH = {1: "ARM", 2: "Welcome", 3: "Dark mode", 4: "Crash", 5: "Release"}   # a search that finds only that thread
SHOP, FORUM = "http://127.0.0.1:8080", "http://127.0.0.1:8081"
ORDERS = ("SELECT p.name, i.qty FROM orders o JOIN order_items i ON i.order_id = o.id JOIN products p ON p.id = "
          "i.product_id WHERE o.customer = 'you' ORDER BY o.id, p.id")
REPLIES = "SELECT thread_id, body FROM posts WHERE author = 'you' ORDER BY id"


def sk(id: str, desc: str, build, sample, app: str) -> None:
  define(id, desc, sample, build, kind="hybrid", apps=("chromium", app))


def _setup(app: str) -> list[dict[str, Any]]:
  url, title = (SHOP, "Shop") if app == "shop" else (FORUM, "Forum")
  return [{"type": "web_replica", "app": app}, {"type": "browser", "url": url + "/", "title": title}]


def _post(url: str, body: dict[str, Any]) -> str:
  return f"curl -sf -X POST -H 'Content-Type: application/json' -d '{json.dumps(body)}' {url}"


# ---- shop -----------------------------------------------------------------------------------------
def _add(name: str, qty: int) -> list[dict[str, Any]]:
  """From a page with the search box focused: search, set the one result's quantity, add (-> the cart)."""
  return [type_(name + "\n"), wait(1), key("ctrl", "a"), type_(f"{qty}\n"), wait(1)]


ORDER = [key("Return"), wait(1)]            # the cart page focuses "Place order"
BACK = [key("Tab"), key("Return"), wait(1)]  # ... and Tab reaches "Continue shopping"


def _api_buy(items: list[tuple[str, int]], checkout: bool = True) -> list[dict[str, Any]]:
  adds = " && ".join(_post(f"{SHOP}/api/cart", {"product_id": PRODUCTS[n][0], "qty": q}) for n, q in items)
  return [bash(f"curl -s {SHOP}/api/products"),
          bash(adds + (f" && {_post(f'{SHOP}/api/checkout', {})}" if checkout else ""))]


def _qty(r: random.Random, name: str, most: int = 4) -> int:
  """A quantity the shop has in stock (more than the stock is refused with an error page)."""
  return r.randint(1, min(most, PRODUCTS[name][2]))


def _buy(p):
  name, q = p["product"], p["qty"]
  return package(f"The shop is open in the browser. Buy {q} '{name}': put exactly that in the cart and place the order.",
                 _setup("shop"), {"type": "web_db", "app": "shop", "query": ORDERS, "rows": [[name, q]]},
                 _add(name, q + 1) + ORDER, gui=_add(name, q) + ORDER, hybrid=_api_buy([(name, q)]), max_steps=MAX_STEPS)


sk("web.shop.buy_quantity", "Order a given quantity of a named product",
   _buy, lambda r: (lambda n: {"product": n, "qty": _qty(r, n)})(r.choice(sorted(PRODUCTS))), "shop")


UNIQUE_PRICE = sorted(n for n, (_, c, _) in PRODUCTS.items() if sum(c == o for _, o, _ in PRODUCTS.values()) == 1)


def _buy_by_price(p):
  name, q = p["product"], p["qty"]
  cents = PRODUCTS[name][1]
  other = UNIQUE_PRICE[(UNIQUE_PRICE.index(name) + 1) % len(UNIQUE_PRICE)]
  return package(f"The shop is open in the browser. Order {q} of the product that costs ${cents / 100:.2f}.",
                 _setup("shop"), {"type": "web_db", "app": "shop", "query": ORDERS, "rows": [[name, q]]},
                 _add(other, q) + ORDER, gui=_add(name, q) + ORDER, hybrid=_api_buy([(name, q)]), max_steps=MAX_STEPS)


sk("web.shop.buy_by_price", "Order the product with a given price",
   _buy_by_price, lambda r: (lambda n: {"product": n, "qty": _qty(r, n, 3)})(r.choice(UNIQUE_PRICE)), "shop")


def _cheaper(p):
  a, b = p["pair"]
  name = min((a, b), key=lambda n: PRODUCTS[n][1])
  dear = a if name == b else b
  return package(f"The shop is open in the browser. Of '{a}' and '{b}', order one unit of whichever is cheaper.",
                 _setup("shop"), {"type": "web_db", "app": "shop", "query": ORDERS, "rows": [[name, 1]]},
                 _add(dear, 1) + ORDER, gui=_add(name, 1) + ORDER, hybrid=_api_buy([(name, 1)]), max_steps=MAX_STEPS)


def _pair(r: random.Random) -> dict[str, Any]:
  while True:
    a, b = distinct(r, sorted(PRODUCTS), 2)
    if PRODUCTS[a][1] != PRODUCTS[b][1]:
      return {"pair": [a, b]}


sk("web.shop.buy_cheaper", "Order the cheaper of two named products", _cheaper, _pair, "shop")


def _fill_cart(p):
  (a, qa), (b, qb) = p["items"]
  # the cart in product-id order, and no order placed
  cart = ", ".join(f"{n} x{q}" for n, q in sorted(p["items"], key=lambda x: PRODUCTS[x[0]][0]))
  query = ("SELECT (SELECT group_concat(name || ' x' || qty, ', ') FROM (SELECT p.name, c.qty FROM cart c JOIN products p "
           "ON p.id = c.product_id ORDER BY p.id)), (SELECT count(*) FROM orders WHERE customer = 'you')")
  return package(f"The shop is open in the browser. Put {qa} '{a}' and {qb} '{b}' in the cart. Do not place the order.",
                 _setup("shop"), {"type": "web_db", "app": "shop", "query": query, "rows": [[cart, 0]]},
                 _add(a, qa) + BACK + _add(b, qb) + ORDER, gui=_add(a, qa) + BACK + _add(b, qb),
                 hybrid=_api_buy([(a, qa), (b, qb)], checkout=False), max_steps=MAX_STEPS)


sk("web.shop.fill_cart", "Put two named products in the cart without ordering",
   _fill_cart, lambda r: {"items": [[n, _qty(r, n)] for n in distinct(r, sorted(PRODUCTS), 2)]}, "shop")


def _order_two(p):
  (a, qa), (b, qb) = p["items"]
  rows = [[n, q] for n, q in sorted(p["items"], key=lambda x: PRODUCTS[x[0]][0])]   # one order, items by product id
  return package(f"The shop is open in the browser. Place one order with {qa} '{a}' and {qb} '{b}' in it.",
                 _setup("shop"), {"type": "web_db", "app": "shop", "query": ORDERS, "rows": rows},
                 _add(a, qa) + ORDER, gui=_add(a, qa) + BACK + _add(b, qb) + ORDER,
                 hybrid=_api_buy([(a, qa), (b, qb)]), max_steps=MAX_STEPS)


sk("web.shop.order_two", "Place one order holding two named products",
   _order_two, lambda r: {"items": [[n, _qty(r, n, 3)] for n in distinct(r, sorted(PRODUCTS), 2)]}, "shop")


# ---- forum ----------------------------------------------------------------------------------------
def _reply_gui(tid: int, text: str) -> list[dict[str, Any]]:
  """Search the thread, open the one result (the first link), type the reply, post it."""
  return [type_(SEARCH[tid] + "\n"), wait(1), key("Tab"), key("Return"), wait(1), type_(text), key("Tab"), key("Return"),
          wait(1)]


def _reply_api(tid: int, text: str, look: str) -> list[dict[str, Any]]:
  return [bash(look), bash(_post(f"{FORUM}/api/threads/{tid}/posts", {"body": text}))]


def _line(r: random.Random) -> str:
  return r.choice(["Thanks {n}, I will try it in {c}.", "Same here on the {w} build.", "Can you share a log, {n}?",
                   "Fixed for me after the {w} update.", "+1 from the {c} team."]).format(
      n=r.choice(NAMES), c=r.choice(CITIES), w=r.choice(WORDS))


def _reply_title(p):
  tid, text = p["thread"], p["text"]
  near = (tid % 5) + 1
  return package(f"The forum is open in the browser. Reply '{text}' to the thread '{THREADS[tid][0]}'.",
                 _setup("forum"), {"type": "web_db", "app": "forum", "query": REPLIES, "rows": [[tid, text]]},
                 _reply_gui(near, text), gui=_reply_gui(tid, text),
                 hybrid=_reply_api(tid, text, f"curl -s {FORUM}/api/threads"), max_steps=MAX_STEPS)


sk("web.forum.reply_to_thread", "Post a given reply to the thread with a given title",
   _reply_title, lambda r: {"thread": r.randint(1, 5), "text": _line(r)}, "forum")

STARTERS = {a: t for t, (_, a, _) in THREADS.items() if sum(a == o for _, o, _ in THREADS.values()) == 1}


def _reply_author(p):
  author, text = p["author"], p["text"]
  tid = STARTERS[author]
  other = next(t for t in STARTERS.values() if t != tid)
  return package(f"The forum is open in the browser. Find the thread that {author} started and reply '{text}' to it.",
                 _setup("forum"), {"type": "web_db", "app": "forum", "query": REPLIES, "rows": [[tid, text]]},
                 _reply_gui(other, text), gui=_reply_gui(tid, text),
                 hybrid=_reply_api(tid, text, f"curl -s {FORUM}/api/threads"), max_steps=MAX_STEPS)


sk("web.forum.reply_by_starter", "Reply to the thread a given user started",
   _reply_author, lambda r: {"author": r.choice(sorted(STARTERS)), "text": _line(r)}, "forum")


# back to the thread list (whose search box takes the focus): the thread page focuses its reply box,
# Tab, Tab reach "All threads" (the browser is a kiosk window: no address bar)
HOME = [key("Tab"), key("Tab"), key("Return"), wait(1)]


def _reply_two(p):
  (t1, x1), (t2, x2) = p["replies"]
  return package(f"The forum is open in the browser. Reply '{x1}' to the thread '{THREADS[t1][0]}', then reply '{x2}' to "
                 f"the thread '{THREADS[t2][0]}'.", _setup("forum"),
                 {"type": "web_db", "app": "forum", "query": REPLIES, "rows": [[t1, x1], [t2, x2]]},
                 _reply_gui(t1, x1) + HOME + _reply_gui(t2, x1), gui=_reply_gui(t1, x1) + HOME + _reply_gui(t2, x2),
                 hybrid=[bash(f"curl -s {FORUM}/api/threads"),
                         bash(_post(f"{FORUM}/api/threads/{t1}/posts", {"body": x1}) + " && "
                              + _post(f"{FORUM}/api/threads/{t2}/posts", {"body": x2}))], max_steps=MAX_STEPS)


def _two_lines(r: random.Random) -> dict[str, Any]:
  t1, t2 = distinct(r, sorted(THREADS), 2)
  x1 = _line(r)
  x2 = next(x for x in iter(lambda: _line(r), None) if x != x1)
  return {"replies": [[t1, x1], [t2, x2]]}


sk("web.forum.reply_two_threads", "Post given replies to two threads, in order", _reply_two, _two_lines, "forum")


def _count(p):
  tid = p["thread"]
  n = THREADS[tid][2]
  look = f"curl -s {FORUM}/api/threads/{tid} | python3 -c \"import json,sys; print(len(json.load(sys.stdin)['posts']))\""
  return package(f"The forum is open in the browser. Reply to the thread '{THREADS[tid][0]}' with the number of posts it has "
                 "now, as digits and nothing else.", _setup("forum"),
                 {"type": "web_db", "app": "forum", "query": REPLIES, "rows": [[tid, str(n)]]},
                 _reply_gui(tid, str(n + 1)), gui=_reply_gui(tid, str(n)), hybrid=_reply_api(tid, str(n), look),
                 max_steps=MAX_STEPS)


sk("web.forum.reply_post_count", "Reply to a thread with its number of posts",
   _count, lambda r: {"thread": r.randint(1, 5)}, "forum")


def _starter(p):
  tid = p["thread"]
  author = THREADS[tid][1]
  return package(f"The forum is open in the browser. Reply to the thread '{THREADS[tid][0]}' with the user name of the person "
                 "who started it, and nothing else.", _setup("forum"),
                 {"type": "web_db", "app": "forum", "query": REPLIES, "rows": [[tid, author]]},
                 _reply_gui(tid, "you"), gui=_reply_gui(tid, author),
                 hybrid=_reply_api(tid, author, f"curl -s {FORUM}/api/threads/{tid}"), max_steps=MAX_STEPS)


sk("web.forum.reply_starter_name", "Reply to a thread with the name of the user who started it",
   _starter, lambda r: {"thread": r.randint(1, 5)}, "forum")
