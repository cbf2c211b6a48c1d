"""Multi-reference task packages (channel-labelled) and the harness's tool-set switch."""
import pytest

from mage_jax.actions import parsing
from mage_jax.actions import schema as tools
from mage_jax.agent import episode as episode_lib
from mage_jax.agent.policies import ScriptedPolicy
from mage_jax.tasks import package as pk

DONE = {"name": "computer_use", "arguments": {"action": "terminate", "status": "success"}}
BASH = {"name": "bash", "arguments": {"command": "echo hi > out.txt"}}
TYPE = {"name": "computer_use", "arguments": {"action": "type", "text": "hi"}}


def _pkg(**kw):
  d = dict(id="t", instruction="Write hi to out.txt.", kind="hybrid",
           checker={"type": "file_text", "path": "out.txt", "equals": "hi"})
  d.update(kw)
  return d


def test_shorthand_reference_gets_its_channel_from_its_calls():
  assert pk.package_from_dict(_pkg(reference=[BASH, DONE])).references == [
      {"channel": "terminal", "calls": [BASH, DONE]}]
  assert pk.package_from_dict(_pkg(reference=[TYPE, DONE])).references[0]["channel"] == "gui"
  assert pk.package_from_dict(_pkg(reference=[BASH, TYPE, DONE])).references[0]["channel"] == "hybrid"


def test_references_round_trip_and_select_by_channel():
  refs = [{"channel": "hybrid", "calls": [BASH, DONE]}, {"channel": "gui", "calls": [TYPE, DONE]}]
  p = pk.package_from_dict(_pkg(references=refs))
  assert p.reference == [BASH, DONE]
  assert p.reference_for("gui") == [TYPE, DONE] and p.reference_for("terminal") is None
  again = pk.package_from_dict(p.to_dict())
  assert again.references == refs and "reference" not in p.to_dict()


@pytest.mark.parametrize("refs, needle", [
    ([{"channel": "gui", "calls": [BASH, DONE]}], "labelled 'gui' but its calls use the terminal channel"),
    ([{"channel": "terminal", "calls": [TYPE, DONE]}], "labelled 'terminal' but its calls use the gui"),
    ([{"channel": "mouse", "calls": [TYPE]}], "references[0].channel must be one of"),
    ([{"channel": "gui"}], "exactly 'channel' and 'calls'"),
    ([], "non-empty list"),
])
def test_bad_references_name_the_field(refs, needle):
  with pytest.raises(pk.PackageError, match="references") as e:
    pk.package_from_dict(_pkg(references=refs), source="x/task.json")
  assert needle in str(e.value) and "x/task.json" in str(e.value)


def test_reference_and_references_together_are_refused():
  with pytest.raises(pk.PackageError, match="either 'reference' or 'references'"):
    pk.package_from_dict(_pkg(reference=[BASH], references=[{"channel": "terminal", "calls": [BASH]}]))


def test_scripted_policy_plays_the_named_channel():
  p = pk.package_from_dict(_pkg(references=[{"channel": "terminal", "calls": [BASH, DONE]},
                                            {"channel": "gui", "calls": [TYPE, DONE]}]))
  req = episode_lib.PolicyRequest(p, 1, None, None, [], lambda a: a)
  assert '"bash"' in ScriptedPolicy("reference").act(req).text
  assert '"type"' in ScriptedPolicy("reference:gui").act(req).text
  with pytest.raises(ValueError, match="policy.which"):
    ScriptedPolicy("reference:mouse")


def test_gui_toolset_rejects_bash_and_declares_only_computer_use():
  text = tools.format_response("t", "Run it", "bash", {"command": "ls"})
  assert parsing.parse_for_toolset(text, "hybrid").ok
  r = parsing.parse_for_toolset(text, "gui")
  assert r.error_kind == parsing.INVALID_CALL and "not available" in r.error
  assert [s["function"]["name"] for s in tools.toolset_schemas("gui")] == ["computer_use"]
  with pytest.raises(ValueError, match="toolset"):
    episode_lib.EpisodeConfig(toolset="keyboard")


def test_gui_only_episode_prompt_and_trajectory(tmp_path):
  from tests._agent_helpers import StubEnv

  class Recorder:
    def __init__(self, texts):
      self.texts, self.prompts = list(texts), []

    def act(self, req):
      self.prompts.append(episode_lib.renderer_for(episode_lib.EpisodeConfig()).tok.decode(req.prompt_tokens))
      return episode_lib.PolicyOutput(text=self.texts.pop(0))

  calls = [tools.format_response("t", "Run", "bash", {"command": "ls"}),
           tools.format_response("t", "Stop", "computer_use", {"action": "terminate", "status": "success"})]
  task = pk.package_from_dict(_pkg(reference=[BASH, DONE]))
  for toolset, bash_declared, invalid in (("hybrid", True, 0), ("gui", False, 1)):
    policy = Recorder(calls)
    res = episode_lib.run_episode(StubEnv(), task, policy, episode_lib.EpisodeConfig(
        out_dir=str(tmp_path), toolset=toolset, score_settle=0.0, max_steps=2))
    assert ('"name": "bash"' in policy.prompts[0]) == bash_declared
    assert res.parse_errors.get(parsing.INVALID_CALL, 0) == invalid
    assert res.terminal_actions == 1 - invalid
    assert [t["function"]["name"] for t in res.episode.tools] == list(tools.TOOLSETS[toolset])
    assert res.episode.meta["toolset"] == toolset


def test_extension_checker_and_preparer_types_register():
  from mage_jax.tasks import checkers, preparers

  class Ctx:
    terminal_outputs = []

    def read_file(self, path):
      return {"a.txt": b"7"}.get(path)

    def list_dir(self, path):
      return None

  def validate(spec, where):
    if "path" not in spec:
      raise ValueError(f"{where}: needs 'path'")

  checkers.register("_test_is_seven", checkers.Extension(
      score=lambda ctx, spec: float(ctx.read_file(spec["path"]) == b"7"), validate=validate))
  written = {}
  preparers.register("_test_seven", preparers.Extension(
      run=lambda target, spec, root: target.write_file(spec["path"], b"7"), validate=validate))
  try:
    p = pk.package_from_dict(_pkg(setup=[{"type": "_test_seven", "path": "a.txt"}],
                                  checker={"type": "_test_is_seven", "path": "a.txt"}))
    assert checkers.score(Ctx(), p.checker) == 1.0
    assert checkers.score(Ctx(), {"type": "_test_is_seven", "path": "b.txt"}) == 0.0
    assert checkers.reads_files(p.checker) and not checkers.reads_output(p.checker)

    class Target:
      def write_file(self, path, data):
        written[path] = data
    preparers.run_preparer(Target(), p.setup[0])
    assert written == {"a.txt": b"7"}
    with pytest.raises(ValueError, match=r"checker: needs .path."):
      pk.package_from_dict(_pkg(checker={"type": "_test_is_seven"}))
    with pytest.raises(ValueError, match="defined twice"):
      checkers.register("file_text", checkers.Extension(score=lambda c, s: 0.0, validate=validate))
  finally:
    checkers.EXTENSIONS.pop("_test_is_seven", None)
    preparers.EXTENSIONS.pop("_test_seven", None)
