"""Forge: workflow-first generation of gated task packages (mage_jax/forge; docs/forge.md).

  python -m launch.forge --config=configs/forge.py --workdir=workdirs/forge
  python -m launch.forge --config=configs/forge.py:tiny --workdir=/tmp/forge_tiny
  python -m launch.forge --config=configs/forge.py:llm --config.llm.base_url=http://127.0.0.1:8000/v1 \
      --workdir=workdirs/forge_llm        # LLM nodes propose params and reword instructions
  python -m launch.forge --config=configs/forge.py:apps --workdir=workdirs/forge_apps   # real apps + web

Then: python -m launch.eval --config=configs/eval.py:scripted --config.suite=workdirs/forge/suite

Arg: "" (full: every skill of the taxonomy but the real-app and web domains, deterministic nodes),
"tiny" (a few attempts per skill, 3 rounds; tests narrow `skills`), "llm" (the full run with LLM
nodes), "apps" (only the real-app and web-replica domains: LibreOffice, GIMP, Chromium; one app
start per episode makes each gate 30-60 s, so they run apart from the full config's 30 minutes).
"""
from __future__ import annotations

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  arg = arg or ""
  if arg not in ("", "tiny", "llm", "apps"):
    raise ValueError(f"configs/forge.py: unknown arg {arg!r}; expected '', 'tiny', 'llm' or 'apps'")
  tiny, apps = arg == "tiny", arg == "apps"
  c = ml_collections.ConfigDict()
  c.taxonomy = "mage_jax/forge/taxonomy.json"   # "" = run every registered skill
  c.skill_modules = ["mage_jax.forge.skills"]   # imported (packages: every submodule) to register skills
  c.skills = []                                 # [] = every taxonomy skill; else these ids
  c.domains = ["apps", "web"] if apps else []   # [] = every domain; else only these
  # domains left out (after `domains`): the real-app and web skills start LibreOffice / GIMP /
  # Chromium in every episode (30-60 s a gate), so the full run's 30-minute budget leaves them to :apps
  c.exclude_domains = [] if apps else ["apps", "web"]
  c.skills_per_domain = 1 if tiny else 0        # >0: only the first N skills of each domain
  # attempts per skill in round 1; rounds 2-3 spread the same total by the student's band, at
  # least 1 per skill: the full run makes ~1,200 candidates over 3 rounds (>= 4 per skill)
  c.attempts_per_skill = 2
  c.rounds = 1 if apps else 3                   # apps: one round (~50 candidates, each gate 30-60 s)
  c.workers = 2                                 # generation processes (CPU-bound: one per core)
  c.gate_workers = 2 if tiny else 4 if apps else 8   # sandbox gate processes (desktop gates mostly wait;
                                                     # a LibreOffice or Chromium gate keeps a core busy)
  c.gate = True                                 # run the package gates (False: file gate only)
  c.phrasing = True                             # a seeded frame around each instruction (forge/phrasing.py)
  c.near_dup = 0.9                              # word 3-gram Jaccard at/above which two instructions are one
  c.band = (0.2, 0.8)                           # the student's frontier band of success
  c.refine_at = 0.5                             # rejection rate that triggers a workflow refinement
  c.progress = not tiny
  c.suite_dir = ""                              # "" = <workdir>/suite
  # the rounds' student (forge/student.py policy_factory): noisy_scripted (a stand-in: the reference
  # with per-step slips, rate by skill) | scripted | openai (an endpoint: a hosted model, vLLM, or
  # a checkpoint served by launch.serve's embedded engine) | checkpoint (an HF dir, in this process)
  c.student = ml_collections.ConfigDict(dict(
      enabled=True, kind="noisy_scripted", max_steps=30,
      per_skill=8,                               # >= episodes per skill per round (tasks repeated)
      noise=dict(base=0.05, spread=0.5),         # noisy_scripted
      which="reference",                         # scripted
      base_url="http://127.0.0.1:8000/v1", model="mage", tool_protocol="text",   # openai
      checkpoint="", greedy=True,                # checkpoint
      max_tokens=1024, temperature=0.0, top_p=1.0, **common.endpoint_fields()))
  # child skills from the student's grouped failures (rounds.child_skills): per skill and round
  c.children = ml_collections.ConfigDict(dict(enabled=True, min_failures=2, per_skill=1))
  c.env = ml_collections.ConfigDict(dict(command_timeout=20.0))   # agent.env.EnvConfig fields
  c.llm = ml_collections.ConfigDict(dict(
      params=arg == "llm", reword=arg == "llm",   # LLM nodes in every workflow
      judge=False,           # an LLM judge must agree that a rewording asks the same (forge/consistency.py)
      siblings=0,                                 # skills per round whose siblings an LLM proposes
      base_url="http://127.0.0.1:8000/v1", model="mage", max_tokens=512, temperature=0.0,
      max_retries=2,         # re-asks after an invalid reply (HTTP retries: http_retries)
      # the endpoint: api key env var, server kind, HTTP retries, concurrency, $ per 1M tokens
      **common.endpoint_fields()))
  return c
