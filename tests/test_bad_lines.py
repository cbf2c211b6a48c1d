"""Lines that used to abort a whole read, or pass silently, are counted skips naming file:line
and the field: bytes that are not UTF-8, 100k-deep or over-deep JSON, oversized integers,
NaN/Infinity, lone surrogates, repeated episode ids (within a file, across the files of a pack
and across its sources); a UTF-8 BOM is accepted. Good episodes around them all survive, through
`read_all`, `pack_job.pack` (launch.pack) and `import_data.import_file` (launch.import_data)."""
import json

import pytest

from launch import import_data
from mage_jax.data import pack_job, records
from mage_jax.data import trajectory as tr
from mage_jax.data.config import default_data_config, sources_config


def _ep(ep_id, **kw):
  return {"id": ep_id, "instruction": "List the folder.", "tools": ["bash"], **kw, "steps": [
      {"observation": {"screenshot": None, "text": "$ "}, "think": "ls shows it.", "action": "List it.",
       "tool_call": {"name": "bash", "arguments": {"command": "ls"}}}]}


def _line(ep_id, **kw):
  return json.dumps(_ep(ep_id, **kw)).encode()


def _nested(depth):
  d = "leaf"
  for _ in range(depth):
    d = {"k": d}
  return d


# line -> (bytes, expected skip kind or None, text the reason must contain)
BAD_FILE = {
    1: (b"\xef\xbb\xbf" + _line("bom-first"), None, ""),                       # BOM: accepted
    2: (_line("good-2"), None, ""),
    3: (_line("latin1").replace(b"List", b"Caf\xe9 list"), tr.INVALID_UTF8, "byte 0xe9 at column"),
    4: (b"[" * 100_000 + b"]" * 100_000, tr.TOO_DEEP, "nested too deeply"),
    5: (json.dumps(dict(_ep("deep"), meta=_nested(100))).encode(), tr.TOO_DEEP, "meta.k.k"),
    6: (_line("nan").replace(b'"tools"', b'"reward": NaN, "tools"'),
        tr.INVALID_FIELD, "reward: nan is not a finite number"),
    7: (_line("inf").replace(b'"tools"', b'"reward": -Infinity, "tools"'), tr.INVALID_FIELD, "reward: -inf"),
    8: (_line("big").replace(b'"tools"', b'"reward": 1e999, "tools"'), tr.INVALID_FIELD, "reward: inf"),
    9: (_line("digits").replace(b'"tools"', b'"stage": ' + b"9" * 5000 + b', "tools"'),
        tr.MALFORMED_JSON, "4300 digits"),
    10: (_line("good-2"), tr.DUPLICATE_ID, "'good-2' is already used by {path}:2"),
    11: (_line("surrogate").replace(b'"$ "', b'"\\ud800 $"'), tr.INVALID_FIELD,
         "steps[0].observation.text: lone surrogate"),
    12: (_line("nan-meta").replace(b'"tools"', b'"meta": {"scores": [1.0, NaN]}, "tools"'),
         tr.INVALID_FIELD, "meta.scores[1]: nan"),
    13: (_line("good-13"), None, ""),
    14: (_line("\udc00-id"), tr.INVALID_FIELD, "(episode '\\udc00-id'): invalid_field: id: lone surrogate"),
}


def write_bad_file(path):
  path.write_bytes(b"\n".join(BAD_FILE[k][0] for k in sorted(BAD_FILE)) + b"\n")
  return str(path)


def check_skips(path, items):
  """`items`: the SkippedItems (or their strings) of BAD_FILE at `path`, in line order."""
  want = [(k, kind, why.format(path=path)) for k, (_, kind, why) in sorted(BAD_FILE.items()) if kind]
  got = [str(s) for s in items]
  assert len(got) == len(want), got
  for (line, kind, why), text in zip(want, got):
    assert text.startswith(f"{path}:{line}") and f": {kind}: " in text and why in text, (line, text)
    text.encode("utf-8")  # printable and writable into a UTF-8 report


GOOD = ["bom-first", "good-2", "good-13"]


def test_read_counts_every_bad_line_and_keeps_every_good_episode(tmp_path):
  path = write_bad_file(tmp_path / "mixed.jsonl")
  report = tr.ReadReport()
  assert [e.id for e in tr.read_all([path], report=report)] == GOOD
  assert report.episodes == len(GOOD)
  check_skips(path, report.skipped_items)
  want_kinds = [kind for _, kind, _ in BAD_FILE.values() if kind]
  assert dict(report.skipped) == {k: want_kinds.count(k) for k in set(want_kinds)}


def test_duplicate_ids_across_files(tmp_path):
  a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
  a.write_bytes(_line("x") + b"\n" + _line("y") + b"\n")
  b.write_bytes(_line("y") + b"\n" + _line("z") + b"\n")
  report = tr.ReadReport()
  assert [e.id for e in tr.read_all([str(a), str(b)], report=report)] == ["x", "y", "z"]
  [dup] = report.skipped_items
  assert str(dup) == f"{b}:1 (episode y): duplicate_id: id: 'y' is already used by {a}:2"
  # A file read on its own has its own ids: no duplicate there.
  assert all(isinstance(e, tr.Episode) for e in tr.read_episodes(str(b)))


def test_episode_from_dict_rejects_non_finite_reward():
  for bad in (float("nan"), float("inf")):
    with pytest.raises(tr.EpisodeError, match="reward: expected a finite number"):
      tr.episode_from_dict(_ep("r", reward=bad))
  assert tr.episode_from_dict(_ep("r", reward=0.5)).reward == 0.5


def test_pack_manifest_counts_good_episodes_exactly(tmp_path):
  mixed = write_bad_file(tmp_path / "mixed.jsonl")
  other = tmp_path / "other.jsonl"  # a second source repeating an id of the first
  other.write_bytes(_line("good-13") + b"\n" + _line("other-1") + b"\n")
  c = default_data_config()
  c.sources = sources_config({"a": (mixed, 1.0), "b": (str(other), 1.0)})
  c.seq_len, c.patch_budget, c.pack_buffer, c.render.context_len = 2048, 64, 8, 2048
  m = pack_job.pack(c, str(tmp_path / "packed"), workers=1)
  assert m["episodes"] == len(GOOD) + 1 and m["sources"]["a"]["episodes"] == len(GOOD)
  assert m["sources"]["b"]["skipped"]["read"] == {tr.DUPLICATE_ID: 1}
  check_skips(mixed, [s for s in m["skipped_items"] if s.startswith(mixed)])
  assert f"{other}:1 (episode good-13): duplicate_id: id: 'good-13' is already used by {mixed}:13" \
      in m["skipped_items"]
  packed = [s["episode_id"] for name in ("a", "b") for rec in records.read_records(
      records.shard_paths(str(tmp_path / "packed" / name))) for s in records.decode_meta(rec)]
  assert sorted(packed) == sorted(GOOD + ["other-1"])


def test_import_data_skips_bad_lines_and_imports_the_rest(tmp_path):
  src = tmp_path / "chats.jsonl"
  chat = lambda i: json.dumps({"id": i, "messages": [
      {"role": "user", "content": "List the folder."},
      {"role": "assistant", "content": "Action: List it.", "tool_calls": [
          {"type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}]}).encode()
  src.write_bytes(b"\xef\xbb\xbf" + chat("c1") + b"\n" + chat("c2").replace(b"List", b"\xff")
                  + b"\n" + b"[" * 100_000 + b"\n" + chat("c1") + b"\n"
                  + chat("c5").replace(b'"List the', b'"List \\udfff the') + b"\n" + chat("c6") + b"\n")
  rep = import_data.import_file("messages", str(src), str(tmp_path / "out" / "e.jsonl"), progress=False)
  assert (rep["records"], rep["episodes"]) == (6, 2)
  assert rep["skipped"] == {tr.DUPLICATE_ID: 1, tr.INVALID_FIELD: 1, tr.INVALID_UTF8: 1, tr.TOO_DEEP: 1}
  assert [s.split(": ")[0] for s in rep["skipped_items"]] == [f"{src}:{k}" for k in (2, 3)] + [
      f"{src}:4 (episode c1)", f"{src}:5 (episode c5)"]
  assert [e.id for e in tr.read_episodes(str(tmp_path / "out" / "e.jsonl"))] == ["c1", "c6"]
