"""Forge skills on the real applications and the web replicas (issue 31): every skill builds a
package with a GUI reference and a terminal one whose text varies with the seed, the web skills'
copy of the replicas' seed rows matches the server's, the configs run them apart from the full
config, and one skill of each domain passes every sandbox gate (LibreOffice / Chromium).

The whole set is gated by hand (`python -m launch.skillcheck --domains=apps,web --workers=2`,
docs/forge.md records the run): each gate starts the app in a fresh desktop, 30-60 s here.
"""
import collections
import os
import random
import sqlite3
import zlib

import pytest

from configs import forge as forge_config
from mage_jax.forge import engine, skill as skill_lib
from mage_jax.forge.skillcheck import gate_skills, summary
from mage_jax.forge.skills import load_all, package_dict
from mage_jax.forge.skills import web as web_skills
from mage_jax.machine import apps as machine_apps
from mage_jax.tasks import package as pk
from mage_jax.tasks.web import replica
from mage_jax.agent.env import EnvConfig, LocalEnv
from mage_jax.tasks.web import browser
from tests._agent_helpers import needs_sandbox

REG = load_all()
APP_SKILLS = sorted(s for s in REG if s.split(".")[0] in ("apps", "web"))


def test_at_least_twenty_skills_on_real_apps_and_web_replicas():
  per = collections.Counter(s.split(".")[0] for s in APP_SKILLS)
  assert len(APP_SKILLS) >= 20 and per["apps"] >= 10 and per["web"] >= 10, per
  used = {a for s in APP_SKILLS for a in REG[s].apps}
  assert {"calc", "writer", "impress", "gimp", "chromium", "shop", "forum"} <= used, used


@pytest.mark.parametrize("sid", APP_SKILLS)
def test_each_skill_has_a_gui_and_a_terminal_path_and_varies_with_the_seed(sid):
  s = REG[sid]
  texts, checkers = set(), set()
  for seed in range(12):
    d = package_dict(s, s.sample(random.Random(seed)), f"{sid}-{seed}")
    p = pk.package_from_dict(d, source=sid)
    gui = p.reference_for("gui")
    assert gui is not None and pk.channel_of_calls(gui) == "gui", sid
    term = [r["calls"] for r in p.references if r["channel"] != "gui"]
    assert term and pk.channel_of_calls(term[0]) == "terminal", sid   # the same task from the shell
    assert p.near_miss and p.near_miss != gui, sid
    texts.add(p.instruction)
    checkers.add(repr(p.checker))
  # a skill is many tasks: instructions and expected states change with the seed (the forum has 5 threads)
  assert len(texts) >= 5 and len(checkers) >= 5, (sid, len(texts), len(checkers))


def test_the_web_skills_know_the_replicas_seed_rows(tmp_path):
  db = replica._template("shop")
  with sqlite3.connect(db) as c:
    rows = c.execute("SELECT name, id, price_cents, stock FROM products").fetchall()
  assert {n: (i, p, k) for n, i, p, k in rows} == web_skills.PRODUCTS
  db = replica._template("forum")
  with sqlite3.connect(db) as c:
    threads = c.execute("SELECT t.id, t.title, t.author, count(p.id) FROM threads t JOIN posts p ON p.thread_id = t.id "
                        "GROUP BY t.id").fetchall()
  assert {i: (t, a, n) for i, t, a, n in threads} == web_skills.THREADS


def test_the_full_config_leaves_them_to_the_apps_config(monkeypatch):
  # the library's skills only: other test modules register skills of their own at import
  monkeypatch.setattr(engine, "REGISTRY", dict(REG))
  full = forge_config.get_config().to_dict()
  ids, _ = engine.select_skills(full)
  assert ids and not set(ids) & set(APP_SKILLS)
  ids, _ = engine.select_skills(forge_config.get_config("apps").to_dict())
  assert sorted(ids) == APP_SKILLS
  named = {**full, "skills": ["apps.calc.sum_total"]}      # named ids run whatever their domain
  assert engine.select_skills(named)[0] == ["apps.calc.sum_total"]
  with pytest.raises(skill_lib.TaxonomyError, match="config.domains: unknown domains \\['app'\\]"):
    engine.select_skills({**full, "domains": ["app"]})


def _pick(domain: str) -> str:
  """One skill of the domain, rotating by day (FORGE_GATE_ROTATION) like test_forge_skills."""
  import datetime
  rot = os.environ.get("FORGE_GATE_ROTATION", datetime.date.today().isoformat())
  return min((s for s in APP_SKILLS if s.startswith(domain + ".")), key=lambda i: zlib.crc32(f"{i}:{rot}".encode()))


@needs_sandbox
@pytest.mark.slow
def test_one_skill_per_domain_passes_every_gate():
  for a in ("calc", "gimp"):
    if machine_apps.available(a):
      pytest.skip(machine_apps.available(a))
  if not os.path.exists(browser.CHROMIUM):
    pytest.skip("chromium is not installed (make system-apps)")
  ids = [_pick("apps"), _pick("web")]
  # the Forge engine's 1280x800 screen: the GUI references click fixed pixels of LibreOffice and GIMP
  results = gate_skills(ids, lambda: LocalEnv(EnvConfig(command_timeout=30)), seed=0, workers=2)
  print(summary(results))
  assert all(r.passed for r in results), summary(results)
  for r in results:
    assert r.scores["initial"] == 0 and r.scores["near_miss"] < 1
    assert r.scores["reference"] == 1.0 and r.scores["reference[hybrid]"] == 1.0
