"""Rendering: context window placement, token-exact Qwen3 template parity, loss masks,
prompt decoupling, overlength handling, bad input."""
import json
import os

import jinja2.ext
import numpy as np
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment
from PIL import Image

from mage_jax.actions import schema as tools
from mage_jax.data import prompts
from mage_jax.data import render
from mage_jax.data import tokenizer as tok_lib
from mage_jax.data import trajectory as tr

VS, VE, PAD = "<|vision_start|>", "<|vision_end|>", "<|image_pad|>"


@pytest.fixture(scope="module")
def tok():
  return tok_lib.load_tokenizer()


def make_episode(root, n, texts=None, sizes=None, think=None):
  """n steps; step k (1-based) has THINK-k, ACT-k, OBS-k text (unless texts[k-1] is None)
  and a screenshot of a distinct width 64 + 32*k (so images identify their step)."""
  steps = []
  for k in range(1, n + 1):
    w, h = sizes[k - 1] if sizes else (64 + 32 * k, 64)
    path = os.path.join(root, f"shot{k}.png")
    Image.new("RGB", (w, h), (k * 20 % 256, 50, 90)).save(path)
    text = f"OBS-{k}" if texts is None else texts[k - 1]
    call = (tools.BASH, {"command": f"echo {k}"}) if k % 2 else (
        tools.COMPUTER_USE, {"action": "left_click", "coordinate": [k * 10, 999 - k]})
    steps.append(tr.Step(tr.Observation(path, text), think or f"THINK-{k}", f"ACT-{k}.",
                         tr.ToolCall(*call)))
  return tr.Episode("ep9", "Finish the nine-step task.", steps, source="unit", stage=2)


def renderer(tok, **kw):
  kw.setdefault("prompt_variants", False)
  return render.Renderer(render.RenderConfig(**kw), tokenizer=tok)


def turns(tok, sample):
  """Decoded turns: [(role, text)] split at <|im_start|>."""
  text = tok.decode(sample.tokens).replace(PAD, "")
  out = []
  for chunk in text.split("<|im_start|>")[1:]:
    role, _, body = chunk.partition("\n")
    out.append((role, body.removesuffix("\n").removesuffix("<|im_end|>")))
  return out


# ------------------------------------------------------------------------ context window


@pytest.mark.parametrize("t, folded, full, obs_window, shown, omitted", [
    (1, [], [], [1], [1], []),
    (4, [], [1, 2, 3], [1, 2, 3, 4], [2, 3, 4], [1]),
    (5, [], [1, 2, 3, 4], [1, 2, 3, 4, 5], [3, 4, 5], [1, 2]),
    (9, [1, 2, 3, 4], [5, 6, 7, 8], [6, 7, 8, 9], [7, 8, 9], [6]),
])
def test_window_placement(tmp_path, tok, t, folded, full, obs_window, shown, omitted):
  ep = make_episode(str(tmp_path), 9)
  s = renderer(tok).render_step(ep, t)
  tt = turns(tok, s)
  roles = [r for r, _ in tt]
  # system, first user, then (assistant, tool-user) per full response, then the target.
  assert roles == ["system", "user"] + ["assistant", "user"] * len(full) + ["assistant"]
  user = tt[1][1]
  assert user.startswith("Finish the nine-step task.")
  for k in range(1, 10):
    assert (f"{k}. Action: ACT-{k}." in user) == (k in folded), k
  if folded:
    assert "Previous actions:\n" + "\n".join(f"{k}. Action: ACT-{k}." for k in folded) in user
  assert ("OBS-1" in user) == (1 in obs_window)
  # Full responses in order, each followed by the next observation.
  for i, k in enumerate(full):
    a_text, o_text = tt[2 + 2 * i][1], tt[3 + 2 * i][1]
    assert a_text.startswith(f"<think>\nTHINK-{k}\n</think>\n\nAction: ACT-{k}.\n<tool_call>\n")
    assert o_text.startswith("<tool_response>\n") and o_text.endswith(f"OBS-{k + 1}\n</tool_response>")
  assert tt[-1][1].startswith(f"<think>\nTHINK-{t}\n</think>")
  text = tok.decode(s.tokens)
  for k in range(1, 10):
    assert (f"THINK-{k}\n" in text) == (k in full or k == t), k
    assert (f"OBS-{k}\n" in text or f"OBS-{k}<" in text) == (k in obs_window), k
  # Screenshots: one image block per shown observation, in order; markers on older ones.
  assert int(np.sum(s.tokens == tok_lib.VISION_START_ID)) == len(shown)
  assert text.count(prompts.SCREENSHOT_OMITTED) == len(omitted)
  assert [im.shape[1] for im in s.images] == [64 + 32 * k for k in shown]
  for k in omitted:
    assert f"{prompts.SCREENSHOT_OMITTED}\nOBS-{k}" in text
  pads = int(np.sum(s.tokens == tok_lib.IMAGE_PAD_ID))
  assert pads == sum((im.shape[0] // 16) * (im.shape[1] // 16) // 4 for im in s.images)
  assert s.meta["step"] == t and s.meta["folded"] == len(folded) and s.meta["episode_id"] == "ep9"
  assert s.tokens[-1] == tok_lib.IM_END_ID and s.tokens.dtype == np.int32


# ---------------------------------------------------------------- token-exact vs the template


def template_ids(tok, messages, tool_schemas):
  """The Qwen3 chat template from tokenizer_config.json, rendered as transformers does."""
  env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                      extensions=[jinja2.ext.loopcontrols])
  env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
  text = env.from_string(tok.chat_template).render(messages=messages, tools=tool_schemas,
                                                   add_generation_prompt=False)
  assert text.endswith("<|im_end|>\n")
  return np.asarray(tok.encode(text.removesuffix("\n")), np.int32), text


def image_str(w, h):
  return VS + PAD * ((w // 16) * (h // 16) // 4) + VE


@pytest.mark.parametrize("t, visual_turns, tools_block", [(3, 3, True), (4, 2, True), (2, 2, False)])
def test_token_exact_vs_chat_template(tmp_path, tok, t, visual_turns, tools_block):
  sizes = [(64, 96), (96, 64), (128, 64), (64, 64)]
  texts = [None, "total 0\n-rw-r--r-- café.txt ✓", None, "line with \"quotes\" and <b>tags</b>"]
  ep = make_episode(str(tmp_path), 4, texts=texts, sizes=sizes)
  ep.steps[1].think = "Sauvegarder le fichier « rapport » — 保存.\n\nSecond paragraph."
  ep.steps[1].tool_call = tr.ToolCall(tools.COMPUTER_USE, {"action": "type", "text": "héllo \"wörld\"\n"})
  ep.steps[2].tool_call = tr.ToolCall(tools.COMPUTER_USE, {"action": "key", "keys": ["ctrl", "s"]})
  r = renderer(tok, visual_turns=visual_turns, tools_block=tools_block)
  s = r.render_step(ep, t)

  def obs(k):  # the documented observation content: image (or marker), then "\n" + text
    step = ep.steps[k - 1]
    head = image_str(*sizes[k - 1]) if k > t - visual_turns else "[screenshot omitted]"
    return head + ("\n" + step.observation.text if step.observation.text else "")

  def assistant(k):
    st = ep.steps[k - 1]
    return {"role": "assistant", "reasoning_content": st.think, "content": f"Action: {st.action}",
            "tool_calls": [{"type": "function", "function": {
                "name": st.tool_call.name, "arguments": st.tool_call.arguments}}]}

  messages = [{"role": "system", "content": prompts.SYSTEM_PROMPTS[0]},
              {"role": "user", "content": ep.instruction + "\n\n" + obs(1)}]
  for k in range(1, t):
    messages += [assistant(k), {"role": "tool", "content": obs(k + 1)}]
  messages.append(assistant(t))
  # tools_block=False: the template's rendering with no tools (a system message alone)
  want, text = template_ids(tok, messages, list(tools.TOOL_SCHEMAS) if tools_block else None)
  assert ("<tools>" in text) == tools_block
  assert s.meta["folded"] == 0
  assert len(s.tokens) == len(want)
  np.testing.assert_array_equal(s.tokens, want)
  assert "[screenshot omitted]" in text if visual_turns < t else True


# ------------------------------------------------------------------------------ loss masks


def runs(mask):
  """[(start, end)] of contiguous True spans."""
  m = np.concatenate([[False], mask, [False]]).astype(np.int8)
  d = np.diff(m)
  return list(zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1)))


def response(step):
  return tools.format_response(step.think, step.action, step.tool_call.name,
                               step.tool_call.arguments) + "<|im_end|>"


def test_loss_mask_default_trains_only_target(tmp_path, tok):
  ep = make_episode(str(tmp_path), 6)
  s = renderer(tok).render_step(ep, 6)
  assert s.loss_mask.dtype == bool and s.loss_mask.shape == s.tokens.shape
  [(a, b)] = runs(s.loss_mask)
  assert b == len(s.tokens)
  assert tok.decode(s.tokens[a:b]) == response(ep.steps[5])
  assert tok.decode(s.tokens[a - 3:a]) == "<|im_start|>assistant\n"  # role header not trained


def test_loss_mask_train_all_turns(tmp_path, tok):
  ep = make_episode(str(tmp_path), 7)
  s = renderer(tok, train_all_turns=True).render_step(ep, 7)
  spans = runs(s.loss_mask)
  assert [tok.decode(s.tokens[a:b]) for a, b in spans] == [response(ep.steps[k - 1]) for k in (3, 4, 5, 6, 7)]


def test_loss_mask_think_body(tmp_path, tok):
  ep = make_episode(str(tmp_path), 5)
  s = renderer(tok, mask_think_body=True, train_all_turns=True).render_step(ep, 3)
  spans = [tok.decode(s.tokens[a:b]) for a, b in runs(s.loss_mask)]
  want = []
  for k in (1, 2, 3):
    full = response(ep.steps[k - 1])
    want += ["<think>", full[full.index("</think>"):]]
  assert spans == want
  # The masked body is exactly the text between the tags.
  in_target = np.zeros_like(s.loss_mask)
  start = len(s.tokens) - len(tok.encode(response(ep.steps[2])))
  in_target[start:] = True
  masked = s.tokens[in_target & ~s.loss_mask]
  assert tok.decode(masked) == "\nTHINK-3\n"


# ------------------------------------------------------------------------ prompt decoupling


def test_prompt_decoupling_draws_all_phrasings_with_identical_tools(tmp_path, tok):
  ep = make_episode(str(tmp_path), 3)
  r = renderer(tok, prompt_variants=True, seed=7)
  counts = np.zeros(len(prompts.SYSTEM_PROMPTS), int)
  tool_parts = set()
  for i in range(100):
    ep.id = f"ep{i}"
    for s in r.render_episode(ep):
      counts[s.meta["system_prompt"]] += 1
      system = turns(tok, s)[0][1]
      phrasing, sep, rest = system.partition("\n\n# Tools\n\n")
      assert sep and phrasing == prompts.SYSTEM_PROMPTS[s.meta["system_prompt"]]
      tool_parts.add(rest)
  assert counts.sum() == 300 and (counts > 30).all(), counts
  assert len(prompts.SYSTEM_PROMPTS) >= 3
  [rest] = tool_parts  # the tools block is byte-identical across phrasings
  for schema in tools.TOOL_SCHEMAS:
    assert json.dumps(schema, ensure_ascii=False) in rest
  # Seeded: the same seed repeats the draws, another seed changes them.
  draws = lambda seed: [render.Renderer(render.RenderConfig(seed=seed), tok).prompt_index(ep, k)
                        for k in range(1, 40)]
  assert draws(7) == draws(7) and draws(7) != draws(8)


# ------------------------------------------------------------------------------- overlength


def test_overlength_drops_folded_then_screenshots_then_skips(tmp_path, tok):
  ep = make_episode(str(tmp_path), 9, sizes=[(256, 256)] * 9)  # 64 image tokens each
  full = renderer(tok).render_step(ep, 9)
  target = response(ep.steps[8])
  states, skipped_at = [], None
  for ctx in range(len(full.tokens), 0, -2):
    report = render.RenderReport()
    s = renderer(tok, context_len=ctx).render_step(ep, 9, report)
    if s is None:
      assert report.skipped[render.TOO_LONG] == 1 and report.samples == 0
      assert "needs" in report.skipped_items[0] and "ep9 step 9" in report.skipped_items[0]
      skipped_at = ctx
      break
    assert len(s.tokens) <= ctx
    [(a, b)] = runs(s.loss_mask)
    assert tok.decode(s.tokens[a:b]) == target  # never cut
    state = (s.meta["dropped_folded"], s.meta["dropped_screenshots"])
    text = tok.decode(s.tokens)
    kept = [k for k in range(1, 5) if f"{k}. Action: ACT-{k}." in text]
    assert kept == list(range(state[0] + 1, 5))  # oldest folded lines go first
    assert len(s.images) == 3 - state[1]
    assert text.count(prompts.SCREENSHOT_OMITTED) == 1 + state[1]
    if state[1]:
      assert state[0] == 4  # screenshots only after every folded line is gone
      assert report.truncated_samples == 1 and report.dropped_screenshots == state[1]
    if not states or states[-1] != state:
      states.append(state)
  assert states == [(0, 0), (1, 0), (2, 0), (3, 0), (4, 0), (4, 1), (4, 2)]
  assert skipped_at is not None
  # o_9's screenshot is never dropped: the last state still shows it.
  s = renderer(tok, context_len=skipped_at + 2).render_step(ep, 9)
  assert s.images[0].shape == (256, 256, 3)


# -------------------------------------------------------------------------------- bad input


def test_bad_input_file_every_good_sample_survives(tmp_path, tok):
  Image.new("RGB", (64, 64)).save(tmp_path / "ok.png")
  (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")

  def ep(i, n, shot="ok.png", call=None):
    return {"id": i, "instruction": "Task.", "steps": [
        {"observation": {"screenshot": shot, "text": f"o{k}"}, "think": "t", "action": f"A{k}.",
         "tool_call": call or {"name": "bash", "arguments": {"command": "ls"}}} for k in range(n)]}

  lines = [json.dumps(ep("g1", 3)), "{not json", json.dumps(ep("m", 2, shot="missing.png")),
           json.dumps(ep("u", 2, shot="bad.png")),
           json.dumps(ep("t", 1, call={"name": "rm_rf", "arguments": {}})),
           json.dumps(ep("a", 1, call={"name": "computer_use", "arguments": {"action": "fly"}})),
           json.dumps(ep("e", 0)), json.dumps(ep("g2", 5, shot=None))]
  path = tmp_path / "mixed.jsonl"
  path.write_text("\n".join(lines) + "\n")

  read, rep = tr.ReadReport(), render.RenderReport()
  samples = list(render.render_episodes(tr.read_all([str(path)], report=read), renderer(tok), rep))
  assert [(s.meta["episode_id"], s.meta["step"]) for s in samples] == \
      [("g1", k) for k in (1, 2, 3)] + [("g2", k) for k in range(1, 6)]
  assert {(s.line, s.kind) for s in read.skipped_items} == {
      (2, tr.MALFORMED_JSON), (3, tr.MISSING_IMAGE), (4, tr.UNREADABLE_IMAGE),
      (5, tr.UNKNOWN_TOOL), (6, tr.INVALID_ARGUMENTS), (7, tr.EMPTY_EPISODE)}
  assert all(str(s).startswith(f"{path}:{s.line}") for s in read.skipped_items)
  assert rep.samples == 8 and not rep.skipped

  # Lazy checking: with image_check="none" the renderer skips the affected samples instead.
  rep = render.RenderReport()
  eps = list(tr.read_all([str(path)], image_check="none"))
  samples = list(render.render_episodes(eps, renderer(tok), rep))
  assert len(samples) == 8
  assert rep.skipped == {tr.MISSING_IMAGE: 2, tr.UNREADABLE_IMAGE: 2}
  assert any("bad.png" in s for s in rep.skipped_items)


def test_config_from_data_config():
  from mage_jax.data.config import default_data_config
  c = default_data_config().render
  c.full_responses, c.mask_think_body = 2, True
  cfg = render.RenderConfig.from_config(c)
  assert (cfg.full_responses, cfg.visual_turns, cfg.context_len, cfg.mask_think_body) == (2, 3, 32_768, True)
  with pytest.raises(ValueError):
    render.RenderConfig(full_responses=0)


def test_tokenizer_checks_special_ids(tmp_path, tok):
  assert tok.encode("<|im_start|>user\n<think></think><|image_pad|>") == [
      151644, 872, 198, 151667, 151668, 151655]
  assert tok.chat_template and "tool_response" in tok.chat_template
  import tokenizers
  from tokenizers import models
  t = tokenizers.Tokenizer(models.WordLevel({"a": 0, "<|im_end|>": 1}, unk_token="a"))
  t.save(str(tmp_path / "tokenizer.json"))
  with pytest.raises(ValueError, match=r"<\|im_end\|>: expected 151645, got 1"):
    tok_lib.Tokenizer(str(tmp_path))
  with pytest.raises(FileNotFoundError):
    tok_lib.Tokenizer(str(tmp_path / "nowhere.json"))
