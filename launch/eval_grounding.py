"""Click accuracy on imported grounding benchmarks (ScreenSpot-v2, OSWorld-G, any grounding
episodes), per split and category as their leaderboards report it (runs/grounding_eval.py).

  python -m launch.eval_grounding --episodes=data/ssv2/web.jsonl,data/ssv2/mobile.jsonl \
      --base_url=http://localhost:8000/v1 --model=mage --out=workdirs/ground/results.json
  python -m launch.eval_grounding --episodes=data/osworld_g/episodes.jsonl --checkpoint=workdirs/stage1/export
  python -m launch.eval_grounding --episodes=data/ssv2/web.jsonl --predictions=replies.jsonl

The episodes are launch.import_data's output (--format=screenspot_v2 | osworld_g | grounding).
Replies come from an OpenAI-compatible endpoint (--base_url, greedy), a checkpoint run in
process (--checkpoint), or a file of earlier replies (--predictions: JSONL {"id", "text"}; an
episode without a reply counts as a miss and is listed). Writes --out (default
<first episodes file>.grounding_eval.json): the table, and each record's reply and hit.
"""
from __future__ import annotations

import json
import os
import sys

from absl import app, flags

_EPISODES = flags.DEFINE_list("episodes", None, "Native JSONL files of grounding episodes.", required=True)
_BASE_URL = flags.DEFINE_string("base_url", "", "OpenAI-compatible endpoint serving the policy.")
_MODEL = flags.DEFINE_string("model", "mage", "Model name at --base_url.")
_CHECKPOINT = flags.DEFINE_string("checkpoint", "", "An exported checkpoint run in process.")
_PREDICTIONS = flags.DEFINE_string("predictions", "", "JSONL of {id, text} replies to score.")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 512, "Reply budget per record.")
_LIMIT = flags.DEFINE_integer("limit", 0, "Evaluate the first N records only (0 = all).")
_OUT = flags.DEFINE_string("out", "", "Results JSON (default <first episodes file>.grounding_eval.json).")


def load_predictions(path: str) -> dict[str, str]:
  out = {}
  with open(path, encoding="utf-8") as f:
    for lineno, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        d = json.loads(line)
      except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{lineno}: not JSON ({e.msg})") from None
      if not isinstance(d, dict) or not isinstance(d.get("id"), str) or not isinstance(d.get("text"), str):
        raise ValueError(f"{path}:{lineno}: expected {{\"id\": str, \"text\": str}}")
      out[d["id"]] = d["text"]
  return out


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if sum(map(bool, (_BASE_URL.value, _CHECKPOINT.value, _PREDICTIONS.value))) != 1:
    raise app.UsageError("give exactly one of --base_url, --checkpoint, --predictions")
  from mage_jax.runs import grounding_eval
  from mage_jax.data import trajectory as tr
  report = tr.ReadReport()
  episodes = [e for e in tr.read_all(_EPISODES.value, report=report)]
  others = [e.id for e in episodes if not grounding_eval.is_grounding(e)]
  episodes = [e for e in episodes if grounding_eval.is_grounding(e)]
  if _LIMIT.value:
    episodes = episodes[:_LIMIT.value]
  if not episodes:
    print(f"error: no grounding episodes in {_EPISODES.value}", file=sys.stderr)
    sys.exit(1)
  missing = []
  if _PREDICTIONS.value:
    preds = load_predictions(_PREDICTIONS.value)
    missing = [e.id for e in episodes if e.id not in preds]
    replies = [preds.get(e.id, "") for e in episodes]
  else:
    from mage_jax.agent import policies
    policy = (policies.OpenAIChatPolicy(_BASE_URL.value, _MODEL.value, max_tokens=_MAX_TOKENS.value,
                                        temperature=0.0) if _BASE_URL.value
              else policies.CheckpointPolicy(_CHECKPOINT.value, max_new_tokens=_MAX_TOKENS.value))
    replies = grounding_eval.replies_from_policy(episodes, policy, grounding_eval.evaluation_renderer())
  scored = [grounding_eval.score(e, r) for e, r in zip(episodes, replies)]
  summary = grounding_eval.summarize(scored)
  print(grounding_eval.format_table(summary))
  out = _OUT.value or os.path.splitext(_EPISODES.value[0])[0] + ".grounding_eval.json"
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  with open(out, "w", encoding="utf-8") as f:
    json.dump({"summary": summary, "episodes_read": report.to_dict(), "not_grounding": others,
               "no_reply": missing, "records": [s.__dict__ for s in scored]}, f, indent=1, ensure_ascii=False)
  if report.skipped:
    print(f"skipped {sum(report.skipped.values())} unreadable episodes: {dict(report.skipped)}")
  if missing:
    print(f"{len(missing)} records have no reply in {_PREDICTIONS.value} (scored as misses)")
  print(f"wrote {out}")


if __name__ == "__main__":
  app.run(main)
