"""The learning proof's non-training curriculum steps (configs/proof.py, docs/results.md).

  teacher_data  the scripted teacher plays the train split through the real harness
                (proof_teacher.collect_teacher_data -> <stage>/teacher/episodes.jsonl); the
                train and held-out splits are written as task-package suites beside it, and
                the RL suite (train values no train instance uses)
  evaluate      the last training stage's params (random init at config.seed when none) served
                by an embedded rollout engine; every held-out instance played per mode
                (runs/proof_eval.py); <stage>/episodes.json + summary
  results       <workdir>/results.json: the three evaluations, paired SFT-vs-RL tests on the
                same instances (exact McNemar, paired bootstrap), the GUI screenshot-blind
                comparison, RL curves; PNG plots in <workdir>/plots/proof_*.png

Each is `fn(config, stage_dir, previous, workdir) -> summary` (mage_jax.runs.curriculum).
"""
from __future__ import annotations

import collections
import json
import os
import time
from typing import Any

import ml_collections

from mage_jax.agent.env import LocalEnv, env_config_from
from mage_jax.agent.episode import EpisodeConfig
from mage_jax.agent.slots import make_pool
from mage_jax.agent.success_stats import mcnemar_exact, paired_bootstrap
from mage_jax.data import render, trajectory
from mage_jax.data.tokenizer import load_tokenizer
from mage_jax.engine.rollout_client import RolloutClient
from mage_jax.engine.rollout_server import RolloutServer
from mage_jax.engine.weight_sync import export
from mage_jax.rl.rollouts import RolloutContext
from mage_jax.runs import proof_eval
from mage_jax.runs import proof_screens, proof_teacher
from mage_jax.tasks import proof_family as fam
from mage_jax.tasks import proof_grounding as pg
from mage_jax.tasks.package import load_suite
from mage_jax.train import copy_probe
from mage_jax.train import run_setup as setup
from mage_jax.train.metrics import read_metrics


def _per(n: int) -> int | None:
  return None if n < 0 else n


def check_config(cfg: ml_collections.ConfigDict) -> None:
  """The family's value pools (data and eval stages), before any stage runs: PoolError naming the
  config.family field."""
  if "family" in cfg:
    fam.value_pools(cfg.family)


def teacher_data(cfg: ml_collections.ConfigDict, stage_dir: str, previous: str, workdir: str) -> dict:
  del previous, workdir
  t0 = time.perf_counter()
  f = cfg.family
  pools = fam.value_pools(f)
  with open(os.path.join(stage_dir, "pools.json"), "w") as fh:   # the values this run used
    json.dump(pools, fh)
  suites = {}
  for split, per in (("train", f.train_per_template), ("heldout", f.heldout_per_template)):
    d = os.path.join(stage_dir, f"{split}_suite")
    fam.write_suite(split, d, seed=f.split_seed, per_template=_per(per), family=f)
    suites[split] = d
  rl_values = rl_suite(f, stage_dir)
  if rl_values:
    suites["rl"] = os.path.join(stage_dir, "rl_suite")
  episodes = proof_teacher.collect_teacher_data(os.path.join(stage_dir, "teacher"), seed=f.split_seed,
                                      per_template=_per(f.train_per_template),
                                      workers=f.teacher_workers, family=f)
  expected = os.path.join(stage_dir, "teacher", "episodes.jsonl")
  if os.path.abspath(episodes) != os.path.abspath(expected):
    raise RuntimeError(f"collect_teacher_data wrote {episodes}; the SFT stage reads {expected}")
  probe = heldout_teacher(f, stage_dir)
  grounding = vision_screens(cfg, stage_dir)
  with open(episodes) as fh:
    n_episodes = sum(1 for line in fh if line.strip())
  counts = {split: len(load_suite(d)) for split, d in suites.items()}
  return {"suites": suites, "episodes_jsonl": episodes, "teacher_episodes": n_episodes,
          "instances": counts, "split_counts": fam.split_counts(f.split_seed, family=f),
          "pools": fam.token_report(load_tokenizer(""), f),   # sizes, tokens per value, coverage
          "probe_episodes": probe, "grounding": grounding, "rl_values": rl_values,
          "row": {"train_tasks": counts["train"], "heldout_tasks": counts["heldout"],
                  "rl_tasks": counts.get("rl", 0),
                  "teacher_episodes": n_episodes, "click_screens": grounding.get("train", 0)},
          "wall_s": time.perf_counter() - t0}


def rl_suite(family: ml_collections.ConfigDict, stage_dir: str) -> dict:
  """<stage_dir>/rl_suite: `family.rl_per_template` train-split instances per template whose words
  and file names no train-suite instance uses, so no SFT teacher episode holds them: the pools'
  `rl_only` values (config.family.rl_fraction) and any train value the train suite's draws missed. Why: on the
  train suite's own instances the SFT policy recalls the values (T=1 success 168/192 on eight
  terminal train tasks, against ~0.7 on fresh-value terminal instances and 85/120 on the held-out
  terminal split; docs/results.md, session 24), so RL there had few mixed groups and practised
  recall, not the copy the held-out split needs. {"words": n, "file_names": n} of the values the draw
  had; {} when rl_per_template is 0."""
  per = int(family.get("rl_per_template", 0))
  if per <= 0:
    return {}
  train = load_suite(os.path.join(stage_dir, "train_suite"))
  exclude = fam.used_values(train)
  pools = fam.value_pools(family)
  fam.write_suite("train", os.path.join(stage_dir, "rl_suite"), seed=family.split_seed, per_template=per,
                  family=family, exclude=exclude, label=fam.RL_LABEL)
  return {kind: len(pools[kind]["train"]) - len(exclude[kind]) for kind in exclude}


def heldout_teacher(family: ml_collections.ConfigDict, stage_dir: str) -> str:
  """The teacher's episodes on `family.probe_per_template` held-out instances per template, for
  the copy probe (train/copy_probe.py; never trained on): <stage_dir>/teacher_heldout/episodes.jsonl
  ("" when probe_per_template is 0)."""
  per = int(family.get("probe_per_template", 0))
  if per <= 0:
    return ""
  return proof_teacher.collect_teacher_data(os.path.join(stage_dir, "teacher_heldout"), seed=family.split_seed,
                                  per_template=per, workers=family.teacher_workers, family=family,
                                  split="heldout")


def vision_screens(cfg: ml_collections.ConfigDict, stage_dir: str) -> dict:
  """The vision stage's click screens (tasks/proof_grounding.py), played by the teacher:
  <stage_dir>/grounding/episodes.jsonl (train layouts) and grounding_heldout/ (held-out
  click_colour screens, for the stage's click accuracy). config.vision.composed_screens more train
  layouts are composed from the played screens' pixels (runs/proof_screens.py) and appended.
  {split: episodes kept}; {} when config.vision.train_screens is 0."""
  v = cfg.get("vision")
  if v is None or v.train_screens <= 0:
    return {}
  f, out = cfg.family, {}
  composed = v.get("composed_screens", 0)
  extra = v.get("extra_colours", pg.DEFAULT_EXTRA)
  for split, n, name in (("train", v.train_screens, "grounding"), ("heldout", v.heldout_screens, "grounding_heldout")):
    more = composed if split == "train" else 0
    tasks = pg.screens(split, n + more, seed=f.split_seed, family=f, extra_colours=extra)
    out_dir = os.path.join(stage_dir, name)
    path = proof_teacher.collect_grounding(out_dir, tasks[:n], workers=f.teacher_workers)
    if more:
      proof_screens.compose_grounding(out_dir, tasks[:n], tasks[n:])
    with open(path) as fh:
      out[split] = sum(1 for line in fh if line.strip())
  return out


def served_weights(cfg: ml_collections.ConfigDict, previous: str, out_root: str,
                   probe_episodes: str = "") -> tuple[str, dict | None]:
  """An HF export of `previous`'s final params (a stage dir), or of the random init at cfg.seed,
  built exactly as the training stages build theirs (run_setup; on config.model.compact_vocab's
  rows when set, exported expanded to the full vocabulary); and the copy probe of those
  params on `probe_episodes` (the held-out teacher episodes; None without them)."""
  setup.enable_compile_cache(cfg.get("compile_cache_dir", ""))
  c = ml_collections.ConfigDict(cfg.to_dict())
  c.init.from_dir = previous or ""
  mesh = setup.make_mesh(c)
  t = setup.build_trainer(c, out_root, mesh, 1, c.data)
  state = setup.initial_state(t)
  probe = None
  if probe_episodes:
    probe = copy_probe_figures(cfg, t, state.params, probe_episodes)
  return export(*t.served_params(state.params), out_root, 0), probe   # full vocabulary when compact


def copy_probe_figures(cfg: ml_collections.ConfigDict, t: Any, params: Any, episodes_path: str) -> dict:
  """train/copy_probe.py on the held-out teacher episodes: NLL of the held-out value tokens."""
  pools = fam.value_pools(cfg.get("family"))
  values = pools["words"]["heldout"] + pools["file_names"]["heldout"]
  episodes = trajectory.read_episodes(episodes_path)
  segments, counts = copy_probe.probe_segments(episodes, values, render.RenderConfig.from_config(cfg.data.render),
                                               cfg.data.seq_len, cfg.data.patch_budget)
  figures = copy_probe.measure(t, params, segments, cfg.step.loss_chunk_size)
  print(f"  copy probe: {figures['nll']:.3f} nats, accuracy {figures['accuracy']:.3f} over "
        f"{figures['value_tokens']} held-out value tokens in {figures['samples']} samples", flush=True)
  return {**figures, "counts": counts, "episodes": episodes_path}


def evaluate(cfg: ml_collections.ConfigDict, stage_dir: str, previous: str, workdir: str) -> dict:
  del workdir
  t0 = time.perf_counter()
  p, e = cfg.proof, cfg.env
  tasks = load_suite(p.heldout_suite)
  fam.check_suite(tasks, "heldout", cfg.get("family"))   # the configured pools' held-out values
  if p.params not in ("previous", "init"):
    raise ValueError(f"config.proof.params={p.params!r}: expected 'previous' or 'init'")
  previous = previous if p.params == "previous" else ""
  probe_path = p.get("probe_episodes", "")
  if probe_path and not os.path.isfile(probe_path):
    raise FileNotFoundError(f"config.proof.probe_episodes={probe_path}: no such file (the data stage "
                            "writes it when family.probe_per_template > 0)")
  path, probe = served_weights(cfg, previous, os.path.join(stage_dir, "weights"), probe_path)
  env_cfg = env_config_from(e)
  ep_cfg = EpisodeConfig(max_steps=p.max_episode_steps, out_dir=os.path.join(stage_dir, "episodes"),
                         **cfg.episode.to_dict())
  pool = make_pool(e.backend, lambda: LocalEnv(env_cfg), ep_cfg, p.slots,
                   ray_address=e.ray_address, slots_per_node=e.slots_per_node)
  server = RolloutServer(path, model_name=cfg.rl.model_name).start()
  try:
    client = RolloutClient(server.url, cfg.rl.model_name, timeout=cfg.rl.request_timeout_s)
    client.wait_ready(cfg.rl.server_ready_timeout_s)

    def ctx_for(mode: str) -> RolloutContext:
      return RolloutContext(client, lambda: 0, max_tokens=cfg.rl.max_tokens,
                            temperature=0.0 if mode == "greedy" else 1.0, top_p=1.0, seed=cfg.seed)

    # Rows are appended as episodes finish, so an interrupted stage resumes where it stopped
    # (and its progress can be read); episodes.json is written once every row is in.
    partial = os.path.join(stage_dir, "episodes.partial.jsonl")
    done = read_partial(partial, {"params_from": previous or f"init:{cfg.seed}", "seed": cfg.seed,
                                  "max_tokens": cfg.rl.max_tokens, "modes": p.modes})
    counts = collections.Counter()
    out = open(partial, "a")

    def progress(row: dict) -> None:
      out.write(json.dumps(row) + "\n")
      out.flush()
      counts[row["mode"]] += 1
      counts[row["mode"] + "_solved"] += int(row["success"])
      n = sum(v for k, v in counts.items() if not k.endswith("_solved"))
      if n % 25 == 0:
        per = " ".join(f"{m} {counts[m + '_solved']}/{counts[m]}" for m in proof_eval.MODES if counts[m])
        print(f"  eval {n} episodes ({time.perf_counter() - t0:.0f} s; solved {per})", flush=True)
    try:
      rows = proof_eval.run_heldout(tasks, lambda t: fam.template_of(t.id), ctx_for, pool,
                                    modes=[m for m in p.modes.split(",") if m], on_result=progress,
                                    done=done)
    finally:
      out.close()
  finally:
    server.stop()
    pool.close()
  with open(os.path.join(stage_dir, "episodes.json"), "w") as f:
    json.dump(rows, f, indent=1)
  summary = proof_eval.summarize(rows)
  line = {f"{m}_success": s["all"]["success"] for m, s in summary.items()}
  if probe:
    line["copy_probe_nll"] = round(probe["nll"], 4)
  print("  " + " ".join(f"{k}={v:.3f}" for k, v in line.items()), flush=True)
  return {"params_from": previous or f"random init (seed {cfg.seed})", "weights": path,
          "instances": len(tasks), "summary": summary, "row": line, "copy_probe": probe,
          "resumed_episodes": len(done),   # played by an earlier, interrupted run (not in wall_s)
          "wall_s": time.perf_counter() - t0}


def read_partial(path: str, header: dict) -> dict[str, dict]:
  """Rows an interrupted evaluation already wrote to `path` (episode_key -> row), after checking
  that they were played with the same params and settings (`header`, the file's first line);
  a fresh file gets the header. A last line cut off mid-write is dropped (and reported)."""
  if not os.path.exists(path) or os.path.getsize(path) == 0:
    with open(path, "w") as f:
      f.write(json.dumps({"header": header}) + "\n")
    return {}
  with open(path) as f:
    lines = [line for line in f if line.strip()]
  first = json.loads(lines[0]).get("header")
  if first != header:
    raise ValueError(f"{path}:1: rows played with {first}, this run is {header}; "
                     "remove the file to evaluate again")
  done, cut = {}, 0
  for i, line in enumerate(lines[1:], start=2):
    try:
      r = json.loads(line)
    except json.JSONDecodeError:
      if i != len(lines):
        raise ValueError(f"{path}:{i}: not a JSON row") from None
      cut += 1
      continue
    done[proof_eval.episode_key(r["mode"], r["task_id"])] = r
  if cut:   # rewrite without it, so the next row is not appended to the fragment
    with open(path, "w") as f:
      f.writelines(line if line.endswith("\n") else line + "\n" for line in lines[:-1])
  print(f"  resuming: {len(done)} episodes already played ({path}"
        f"{'; a cut-off last line dropped' if cut else ''})", flush=True)
  return done


def _read(path: str) -> Any:
  with open(path) as f:
    return json.load(f)


def paired(rows_a: list[dict], rows_b: list[dict], mode: str, samples: int) -> dict:
  """Exact McNemar and paired bootstrap of b vs a on the instances both played in `mode`."""
  a, b = proof_eval.outcomes(rows_a, mode), proof_eval.outcomes(rows_b, mode)
  ids = sorted(set(a) & set(b))
  if not ids:
    return {"instances": 0}
  xa, xb = [a[i] for i in ids], [b[i] for i in ids]
  return {"instances": len(ids), "success_a": sum(xa) / len(ids), "success_b": sum(xb) / len(ids),
          "mcnemar": mcnemar_exact(xa, xb), "bootstrap": paired_bootstrap(xa, xb, samples=samples)}


def results(cfg: ml_collections.ConfigDict, stage_dir: str, previous: str, workdir: str) -> dict:
  """<workdir>/results.json + plots from the evaluation stages and the RL stage's metrics."""
  del previous
  t0 = time.perf_counter()
  out: dict[str, Any] = {"evaluations": {}, "paired": {}, "blind": {}}
  rows = {}
  for label, stage in cfg.evals.items():
    d = os.path.join(workdir, stage)
    if not os.path.exists(os.path.join(d, "episodes.json")):
      continue
    rows[label] = _read(os.path.join(d, "episodes.json"))
    s = _read(os.path.join(d, "summary.json"))
    out["evaluations"][label] = {**{k: s[k] for k in ("params_from", "instances", "summary", "wall_s")},
                                 "copy_probe": s.get("copy_probe")}
  for a, b in (("sft", "rl"), ("init", "sft")):
    if a in rows and b in rows:
      out["paired"][f"{a}_vs_{b}"] = {m: paired(rows[a], rows[b], m, cfg.bootstrap_samples)
                                      for m in ("t1", "greedy")}
  for label, r in rows.items():   # screenshot-blind vs seeing, same policy, GUI/hybrid instances
    seeing = [x for x in r if x["mode"] == "t1" and x["kind"] in proof_eval.SCREEN_KINDS]
    blind = [x for x in r if x["mode"] == "blind"]
    if blind:
      out["blind"][label] = {"seeing": proof_eval.summarize(seeing).get("t1", {}).get("kind", {}),
                             "blind": proof_eval.summarize(blind).get("blind", {}).get("kind", {}),
                             "paired": paired([{**x, "mode": "blind"} for x in seeing], blind,
                                              "blind", cfg.bootstrap_samples)}
  rl_dir = os.path.join(workdir, cfg.rl_stage)
  curve = [r for r in read_metrics(rl_dir) if "step" in r and "reward_mean" in r] \
      if os.path.exists(os.path.join(rl_dir, "metrics.jsonl")) else []
  out["rl_curve"] = [{k: r.get(k) for k in ("step", "reward_mean", "pass_rate", "loss", "parse_errors",
                                           "episodes", "zero_advantage_groups")} for r in curve]
  stages = {}
  for name in sorted(os.listdir(workdir)):
    sp = os.path.join(workdir, name, "summary.json")
    if os.path.exists(sp) and name != os.path.basename(stage_dir):
      stages[name] = _read(sp).get("wall_s")
  out["wall_s"] = stages
  path = os.path.join(workdir, "results.json")
  with open(path, "w") as f:
    json.dump(out, f, indent=1)
  plots = write_plots(out, os.path.join(workdir, "plots"))
  with open(os.path.join(workdir, "results.md"), "w") as f:
    f.write(results_markdown(out))
  row = {f"{k}_t1": v["summary"]["t1"]["all"]["success"] for k, v in out["evaluations"].items()
         if "t1" in v["summary"]}
  return {"results": path, "plots": plots, "row": row, "wall_s": time.perf_counter() - t0}


def _pct(s: dict) -> str:
  return f"{100 * s['success']:.1f}% [{100 * s['success_lo']:.1f}, {100 * s['success_hi']:.1f}] ({s['solved']}/{s['episodes'] - s['env_errors']})"


def results_markdown(res: dict) -> str:
  """The tables of docs/results.md from one run's results.json."""
  ev = res.get("evaluations", {})
  labels = [k for k in ("init", "sft", "rl") if k in ev]
  lines = ["| checkpoint | mode | success (95% Wilson) | calls/task | calls/solved | out tok/task | "
           "invalid calls | GUI share | env errors |", "|---|---|---|---|---|---|---|---|---|"]
  for k in labels:
    for mode, s in ev[k]["summary"].items():
      a = s["all"]
      solved = "-" if a["calls_per_solved_task"] is None else f"{a['calls_per_solved_task']:.2f}"
      lines.append(f"| {k} | {mode} | {_pct(a)} | {a['calls_per_task']:.2f} | {solved} | "
                   f"{a['output_tokens_per_task']:.1f} | {100 * a['invalid_call_rate']:.1f}% | "
                   f"{100 * a['gui_share']:.1f}% | {a['env_errors']} |")
  templates = sorted({t for k in labels for t in ev[k]["summary"].get("t1", {}).get("template", {})})
  lines += ["", "| template (T=1) | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
  for group in ("template", "kind"):
    names = templates if group == "template" else ["terminal", "gui", "hybrid"]
    for n in names:
      cells = [_pct(ev[k]["summary"]["t1"][group][n]) if n in ev[k]["summary"].get("t1", {}).get(group, {})
               else "-" for k in labels]
      lines.append(f"| {group} {n} | " + " | ".join(cells) + " |")
  for name, by_mode in res.get("paired", {}).items():
    for mode, p in by_mode.items():
      if p.get("instances"):
        b = p["bootstrap"]
        lines.append(f"\n{name} ({mode}, {p['instances']} paired instances): {100 * p['success_a']:.1f}% -> "
                     f"{100 * p['success_b']:.1f}%, diff {100 * b['diff']:+.1f} points "
                     f"[{100 * b['lo']:+.1f}, {100 * b['hi']:+.1f}], bootstrap p = {b['p_value']:.4f}, "
                     f"exact McNemar p = {p['mcnemar']['p_value']:.4g} "
                     f"(only before {p['mcnemar']['only_a']}, only after {p['mcnemar']['only_b']})")
  probes = [(k, ev[k]["copy_probe"]) for k in labels if ev[k].get("copy_probe")]
  if probes:
    lines += ["", "| checkpoint | copy probe: held-out value NLL (nats) | value-token accuracy | value tokens |",
              "|---|---|---|---|"]
    lines += [f"| {k} | {p['nll']:.3f} | {100 * p['accuracy']:.1f}% | {p['value_tokens']} |" for k, p in probes]
  for k, b in res.get("blind", {}).items():
    p = b["paired"]
    if p.get("instances"):
      lines.append(f"\n{k}: seeing vs screenshot-blind on {p['instances']} GUI/hybrid instances (T=1): "
                   f"{100 * p['success_a']:.1f}% vs {100 * p['success_b']:.1f}%, "
                   f"exact McNemar p = {p['mcnemar']['p_value']:.4g}")
  return "\n".join(lines) + "\n"


def write_plots(res: dict, out_dir: str) -> list[str]:
  """Success and reward against RL update; calls and tokens per task at init / SFT / RL."""
  import matplotlib   # matplotlib only when plotting (slow import)
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt   # matplotlib only when plotting (slow import)
  os.makedirs(out_dir, exist_ok=True)
  written = []
  curve = res.get("rl_curve", [])
  ev = res.get("evaluations", {})
  fig, ax = plt.subplots(figsize=(7, 4))
  if curve:
    steps = [r["step"] for r in curve]
    ax.plot(steps, [r["reward_mean"] for r in curve], marker=".", label="RL train reward (mean)")
    ax.plot(steps, [r["pass_rate"] for r in curve], marker=".", label="RL train success")
    for label, x in (("sft", 0), ("rl", max(steps))):
      if label in ev and "t1" in ev[label]["summary"]:
        s = ev[label]["summary"]["t1"]["all"]
        ax.errorbar([x], [s["success"]], yerr=[[s["success"] - s["success_lo"]],
                                               [s["success_hi"] - s["success"]]],
                    fmt="s", capsize=4, label=f"held-out success T=1 ({label})")
  ax.set_xlabel("RL update")
  ax.set_ylabel("rate")
  ax.set_ylim(-0.02, 1.02)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  written.append(_save(fig, os.path.join(out_dir, "proof_success_reward.png")))
  for key, ylabel, fname in (("calls_per_task", "model calls per task", "proof_calls.png"),
                             ("output_tokens_per_task", "output tokens per task", "proof_tokens.png")):
    fig, ax = plt.subplots(figsize=(6, 4))
    labels = [k for k in ("init", "sft", "rl") if k in ev]
    for i, mode in enumerate(("t1", "greedy")):
      vals = [ev[k]["summary"].get(mode, {}).get("all", {}).get(key, 0.0) for k in labels]
      ax.bar([j + 0.4 * i for j in range(len(labels))], vals, width=0.4, label=f"{mode}")
    ax.set_xticks([j + 0.2 for j in range(len(labels))], labels)
    ax.set_ylabel(ylabel + " (held-out)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    written.append(_save(fig, os.path.join(out_dir, fname)))
  return written


def _save(fig, path: str) -> str:
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  import matplotlib.pyplot as plt   # matplotlib only when plotting (slow import)
  plt.close(fig)
  return path
