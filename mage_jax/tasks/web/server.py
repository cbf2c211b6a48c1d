"""The web replicas' HTTP server: a shop and a forum over SQLite. Standard library only.

Run by mage_jax/tasks/web/replica.py as `python3 -I -c <this file's source> APP DB PORT`, with the
host's /usr/bin/python3, as the service uid, in the episode's network namespace but the host's
mount namespace: it binds 127.0.0.1:PORT where only that episode can reach it, and its database is
a host file the workload has no path to. Prints "ready" once listening.

Both apps render plain HTML with fixed CSS (GUI references rely on their layout and on autofocus,
see docs/web_replicas.md) and expose a small JSON API under /api/ like a real site would.
Every response is deterministic: no clocks, no random ids.

Shop:  GET /  (catalogue + search box, autofocus)   GET /search?q=  (matches; first qty box autofocus)
       POST /cart/add (product_id, qty)  -> /cart   GET /cart (Place order button, autofocus)
       POST /checkout -> /orders/<id>               GET /orders
       GET /api/products   POST /api/cart {product_id, qty}   POST /api/checkout   GET /api/cart
Forum: GET /  (threads + search box)   GET /search?q=   GET /thread/<id> (reply box, autofocus)
       POST /thread/<id>/reply (body) -> /thread/<id>
       GET /api/threads   GET /api/threads/<id>   POST /api/threads/<id>/posts {body}
"""
import html
import json
import re
import sqlite3
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

USER = "you"  # the logged-in user: posts and orders are theirs

SCHEMAS = {
    "shop": """
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, price_cents INTEGER NOT NULL,
                       stock INTEGER NOT NULL);
CREATE TABLE cart (product_id INTEGER PRIMARY KEY REFERENCES products(id), qty INTEGER NOT NULL CHECK (qty > 0));
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, total_cents INTEGER NOT NULL);
CREATE TABLE order_items (order_id INTEGER REFERENCES orders(id), product_id INTEGER REFERENCES products(id),
                          qty INTEGER NOT NULL);
INSERT INTO products (name, price_cents, stock) VALUES
  ('Blue Mug', 899, 12), ('Red Mug', 899, 3), ('Steel Kettle', 3450, 5), ('Tea Towel', 550, 40),
  ('Oak Cutting Board', 2999, 7), ('Glass Teapot', 2475, 4), ('Coffee Grinder', 4999, 2),
  ('Espresso Cups (set of 4)', 1899, 9);
INSERT INTO orders (customer, total_cents) VALUES ('alice', 1798);
INSERT INTO order_items VALUES (1, 1, 2);
""",
    "forum": """
CREATE TABLE threads (id INTEGER PRIMARY KEY, title TEXT NOT NULL, author TEXT NOT NULL);
CREATE TABLE posts (id INTEGER PRIMARY KEY, thread_id INTEGER NOT NULL REFERENCES threads(id),
                    author TEXT NOT NULL, body TEXT NOT NULL);
INSERT INTO threads (title, author) VALUES
  ('Build fails on ARM', 'dmitri'), ('Welcome to the forum', 'admin'), ('Dark mode request', 'lena'),
  ('Crash when saving large files', 'omar'), ('Release 2.1 schedule', 'admin');
INSERT INTO posts (thread_id, author, body) VALUES
  (1, 'dmitri', 'The linker stops with an unknown relocation on aarch64.'),
  (2, 'admin', 'Please read the rules before posting.'),
  (3, 'lena', 'A dark theme would help at night.'),
  (3, 'omar', 'Seconded.'),
  (4, 'omar', 'Files over 2 GB crash the app on save.'),
  (5, 'admin', 'Release 2.1 is planned for next month.');
""",
}

CSS = ("body{font:16px/1.4 sans-serif;margin:16px 24px;background:#fff;color:#111}"
       "h1{font-size:24px;margin:0 0 12px} table{border-collapse:collapse}"
       "td,th{padding:6px 14px;border-bottom:1px solid #ccc;text-align:left}"
       "input,textarea,button{font-size:16px} textarea{width:520px;height:80px} .post{margin:8px 0}")


def page(title: str, body: str) -> bytes:
  return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
          f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>").encode()


def money(cents: int) -> str:
  return f"${cents // 100}.{cents % 100:02d}"


class App:
  def __init__(self, db: str):
    self.db = db

  def conn(self) -> sqlite3.Connection:
    c = sqlite3.connect(self.db, timeout=10, isolation_level=None)
    c.execute("PRAGMA foreign_keys = ON")
    return c


class Shop(App):
  name = "Shop"

  def product_rows(self, rows, focus_first: bool) -> str:
    out = ["<table><tr><th>Product</th><th>Price</th><th>Stock</th><th>Qty</th><th></th></tr>"]
    for i, (pid, name, price, stock) in enumerate(rows):
      auto = " autofocus" if focus_first and i == 0 else ""
      out.append(f"<tr><td>{html.escape(name)}</td><td>{money(price)}</td><td>{stock}</td>"
                 f"<td><form method=post action='/cart/add'><input type=hidden name=product_id value={pid}>"
                 f"<input name=qty size=3 value=1{auto}> <button>Add to cart</button></form></td></tr>")
    return "".join(out) + "</table>"

  def get(self, path: str, query: dict) -> tuple[int, str, bytes]:
    with self.conn() as c:
      if path == "/":
        rows = c.execute("SELECT id, name, price_cents, stock FROM products ORDER BY id").fetchall()
        search = "<form action='/search'><input name=q placeholder='Search products' autofocus> <button>Search</button></form>"
        return 200, "text/html", page("Shop", search + "<p><a href='/cart'>Cart</a> | <a href='/orders'>Orders</a></p>"
                                      + self.product_rows(rows, False))
      if path == "/search":
        q = query.get("q", "")
        rows = c.execute("SELECT id, name, price_cents, stock FROM products WHERE name LIKE ? ORDER BY id",
                         (f"%{q}%",)).fetchall()
        return 200, "text/html", page(f"Search: {q}", self.product_rows(rows, True) if rows else "<p>No products.</p>")
      if path == "/cart":
        rows = c.execute("SELECT p.name, c.qty, p.price_cents * c.qty FROM cart c JOIN products p ON p.id = c.product_id "
                         "ORDER BY p.id").fetchall()
        body = "".join(f"<tr><td>{html.escape(n)}</td><td>{q}</td><td>{money(t)}</td></tr>" for n, q, t in rows)
        button = ("<form method=post action='/checkout'><button autofocus>Place order</button></form>" if rows
                  else "<p>Your cart is empty.</p>")
        return 200, "text/html", page("Cart", f"<table><tr><th>Product</th><th>Qty</th><th>Total</th></tr>{body}</table>"
                                      + button + "<p><a href='/'>Continue shopping</a></p>")
      if path == "/orders" or path.startswith("/orders/"):
        rows = c.execute("SELECT id, total_cents FROM orders WHERE customer = ? ORDER BY id", (USER,)).fetchall()
        body = "".join(f"<tr><td>Order {i}</td><td>{money(t)}</td></tr>" for i, t in rows)
        return 200, "text/html", page("Your orders", f"<table>{body}</table><p><a href='/'>Shop</a></p>")
      if path == "/api/products":
        rows = c.execute("SELECT id, name, price_cents, stock FROM products ORDER BY id").fetchall()
        return 200, "application/json", json.dumps(
            [{"id": i, "name": n, "price_cents": p, "stock": s} for i, n, p, s in rows]).encode()
      if path == "/api/cart":
        rows = c.execute("SELECT product_id, qty FROM cart ORDER BY product_id").fetchall()
        return 200, "application/json", json.dumps([{"product_id": p, "qty": q} for p, q in rows]).encode()
    return 404, "text/plain", b"not found"

  def add(self, c, product_id: int, qty: int) -> str | None:
    stock = c.execute("SELECT stock FROM products WHERE id = ?", (product_id,)).fetchone()
    have = c.execute("SELECT qty FROM cart WHERE product_id = ?", (product_id,)).fetchone()
    total = qty + (have[0] if have else 0)
    if stock is None or qty <= 0 or total > stock[0]:
      return "no such product, or not that many in stock"
    c.execute("INSERT INTO cart VALUES (?, ?) ON CONFLICT(product_id) DO UPDATE SET qty = ?", (product_id, total, total))
    return None

  def checkout(self, c) -> int | str:
    rows = c.execute("SELECT c.product_id, c.qty, p.price_cents FROM cart c JOIN products p ON p.id = c.product_id").fetchall()
    if not rows:
      return "the cart is empty"
    c.execute("BEGIN IMMEDIATE")
    oid = c.execute("INSERT INTO orders (customer, total_cents) VALUES (?, ?)",
                    (USER, sum(q * p for _, q, p in rows))).lastrowid
    for pid, q, _ in rows:
      c.execute("INSERT INTO order_items VALUES (?, ?, ?)", (oid, pid, q))
      c.execute("UPDATE products SET stock = stock - ? WHERE id = ?", (q, pid))
    c.execute("DELETE FROM cart")
    c.execute("COMMIT")
    return oid

  def post(self, path: str, form: dict) -> tuple[int, str, bytes, str | None]:
    with self.conn() as c:
      try:
        if path in ("/cart/add", "/api/cart"):
          err = self.add(c, int(form.get("product_id", 0)), int(form.get("qty", 0)))
          if err:
            return 400, "text/plain", err.encode(), None
          return (200, "application/json", b'{"ok": true}', None) if path.startswith("/api") else (303, "", b"", "/cart")
        if path in ("/checkout", "/api/checkout"):
          oid = self.checkout(c)
          if isinstance(oid, str):
            return 400, "text/plain", oid.encode(), None
          return ((200, "application/json", json.dumps({"order_id": oid}).encode(), None) if path.startswith("/api")
                  else (303, "", b"", f"/orders/{oid}"))
      except ValueError:
        return 400, "text/plain", b"bad number", None
    return 404, "text/plain", b"not found", None


class Forum(App):
  name = "Forum"

  def thread_list(self, rows) -> str:
    return "<table>" + "".join(f"<tr><td><a href='/thread/{i}'>{html.escape(t)}</a></td><td>{html.escape(a)}</td></tr>"
                               for i, t, a in rows) + "</table>"

  def get(self, path: str, query: dict) -> tuple[int, str, bytes]:
    with self.conn() as c:
      if path == "/":
        rows = c.execute("SELECT id, title, author FROM threads ORDER BY id").fetchall()
        search = "<form action='/search'><input name=q placeholder='Search threads' autofocus> <button>Search</button></form>"
        return 200, "text/html", page("Forum", search + self.thread_list(rows))
      if path == "/search":
        q = query.get("q", "")
        rows = c.execute("SELECT id, title, author FROM threads WHERE title LIKE ? ORDER BY id", (f"%{q}%",)).fetchall()
        return 200, "text/html", page(f"Search: {q}", self.thread_list(rows) if rows else "<p>No threads.</p>")
      m = re.fullmatch(r"/(api/threads|thread)/(\d+)", path)
      if m:
        t = c.execute("SELECT id, title, author FROM threads WHERE id = ?", (int(m[2]),)).fetchone()
        if t is None:
          return 404, "text/plain", b"no such thread"
        posts = c.execute("SELECT author, body FROM posts WHERE thread_id = ? ORDER BY id", (t[0],)).fetchall()
        if m[1] == "api/threads":
          return 200, "application/json", json.dumps(
              {"id": t[0], "title": t[1], "posts": [{"author": a, "body": b} for a, b in posts]}).encode()
        body = "".join(f"<div class=post><b>{html.escape(a)}</b>: {html.escape(b)}</div>" for a, b in posts)
        form = (f"<form method=post action='/thread/{t[0]}/reply'><textarea name=body autofocus></textarea><br>"
                "<button>Post reply</button></form><p><a href='/'>All threads</a></p>")
        return 200, "text/html", page(t[1], body + form)
      if path == "/api/threads":
        rows = c.execute("SELECT id, title, author FROM threads ORDER BY id").fetchall()
        return 200, "application/json", json.dumps([{"id": i, "title": t, "author": a} for i, t, a in rows]).encode()
    return 404, "text/plain", b"not found"

  def post(self, path: str, form: dict) -> tuple[int, str, bytes, str | None]:
    m = re.fullmatch(r"/(?:thread/(\d+)/reply|api/threads/(\d+)/posts)", path)
    if not m:
      return 404, "text/plain", b"not found", None
    tid, body = int(m[1] or m[2]), str(form.get("body", ""))
    if not body.strip():
      return 400, "text/plain", b"empty post", None
    with self.conn() as c:
      if c.execute("SELECT 1 FROM threads WHERE id = ?", (tid,)).fetchone() is None:
        return 404, "text/plain", b"no such thread", None
      c.execute("INSERT INTO posts (thread_id, author, body) VALUES (?, ?, ?)", (tid, USER, body))
    return (200, "application/json", b'{"ok": true}', None) if m[2] else (303, "", b"", f"/thread/{tid}")


APPS = {"shop": Shop, "forum": Forum}


def make_handler(app: App):
  class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet: stderr is not read
      pass

    def send(self, status: int, ctype: str, body: bytes, location: str | None = None) -> None:
      self.send_response(status)
      if location:
        self.send_header("Location", location)
      if ctype:
        self.send_header("Content-Type", ctype + ("; charset=utf-8" if ctype.startswith("text") else ""))
      self.send_header("Content-Length", str(len(body)))
      self.send_header("Cache-Control", "no-store")
      self.end_headers()
      self.wfile.write(body)

    def do_GET(self):
      url = urllib.parse.urlsplit(self.path)
      self.send(*app.get(url.path, dict(urllib.parse.parse_qsl(url.query))))

    def do_POST(self):
      n = min(int(self.headers.get("Content-Length") or 0), 1 << 20)
      raw = self.rfile.read(n).decode(errors="replace")
      if (self.headers.get("Content-Type") or "").startswith("application/json"):
        try:
          form = json.loads(raw)
        except ValueError:
          form = None
        if not isinstance(form, dict):
          return self.send(400, "text/plain", b"the body must be a JSON object")
      else:
        form = dict(urllib.parse.parse_qsl(raw, keep_blank_values=True))
      self.send(*app.post(urllib.parse.urlsplit(self.path).path, form))
  return Handler


def create_db(app: str, path: str) -> None:
  c = sqlite3.connect(path)
  c.executescript(SCHEMAS[app])
  c.commit()
  c.close()


def main(argv: list[str]) -> None:
  app, db, port = argv[0], argv[1], int(argv[2])
  server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(APPS[app](db)))
  server.daemon_threads = True
  print("ready", flush=True)
  server.serve_forever()


if __name__ == "__main__":
  main(sys.argv[1:])
