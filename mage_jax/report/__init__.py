"""The episode viewer: a static, self-contained HTML report of an eval, RL or curriculum workdir
(python -m launch.report; README "Episode viewer").

  load.py     the run's files -> episodes, steps, RL groups, counted skips (nothing raises on bad lines)
  safe_text.py  environment/model text made displayable: controls visible, surrogates escaped, folded
  stats.py    success rates with a Wilson 95% interval, per-task/family tables, --compare flips
  overlay.py  the action drawn on a screenshot (click, drag, scroll, typed text) in image pixels
  curve.py    the RL learning curve as inline SVG
  images.py   JPEG thumbnails (parallel), full-size PNGs linked by relative path
  build.py    Jinja2 (autoescape on) pages + assets -> <workdir>/report/
  rl_record.py  what the RL loop appends to <workdir>/groups.jsonl per update
"""
