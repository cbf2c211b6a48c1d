"""Which rollout-engine URL the environment hosts call, and the start-up checks that they can.

The learner talks to the engine at its own URL (the embedded server's bind address, 127.0.0.1
when it binds every interface, or `rl.server_url`). The policy that runs inside each episode
calls the engine from wherever the episode runs: with `env.backend=ray` that is an env host,
so it uses `rl.engine_advertise_url` ("" = the learner's URL, right on one host). When the Ray
fleet spans hosts (an env node's IP differs from the learner's), a loopback URL is refused
before anything is built, and the URL is fetched once from every env node once the engine is
up, so a firewall or a wrong address fails the start-up instead of three groups later.

The URL helpers and the security note are in engine/address.py.
"""
from __future__ import annotations

import ml_collections

from mage_jax.engine.address import is_loopback
from mage_jax.train.run_setup import ConfigError

FIELD = "config.rl.engine_advertise_url"


def advertised_url(rl: ml_collections.ConfigDict, engine_url: str) -> str:
  return rl.get("engine_advertise_url", "") or engine_url


def _connect(config: ml_collections.ConfigDict, local_slots: int):
  from mage_jax.agent import ray_slots   # Ray is optional (the `ray` extra): imported only for env.backend=ray
  ray_slots.connect(config.env.get("ray_address", ""), local_slots)
  return ray_slots


def refuse_loopback_across_hosts(config: ml_collections.ConfigDict, engine_url: str,
                                 local_slots: int) -> None:
  """With env.backend=ray whose env nodes sit on other hosts than this one, the URL the
  episodes call must not be loopback (one line naming the field)."""
  if config.env.get("backend", "local") != "ray":
    return
  url = advertised_url(config.rl, engine_url)
  if not is_loopback(url):
    return
  ray_slots = _connect(config, local_slots)
  me = ray_slots.driver_ip()
  others = sorted(set(ray_slots.env_nodes().values()) - {me})
  if others:
    raise ConfigError(
        f"{FIELD}={config.rl.get('engine_advertise_url', '')!r} (episodes would call {url}): a loopback "
        f"address, but env.backend=ray has env nodes on other hosts ({', '.join(others[:3])}"
        f"{' ...' if len(others) > 3 else ''}; this host is {me}); set it to an address they can "
        "route to (and bind the engine there: rl.engine_host / launch.vllm --host)")


def check_reachable(config: ml_collections.ConfigDict, engine_url: str, local_slots: int,
                    timeout_s: float = 10.0) -> dict[str, str]:
  """Fetch <url>/models once from every env node; a node that cannot is a start-up error."""
  if config.env.get("backend", "local") != "ray":
    return {}
  url = advertised_url(config.rl, engine_url)
  ray_slots = _connect(config, local_slots)
  answers = ray_slots.probe_url(url.rstrip("/") + "/models", timeout_s)
  failed = {node: err for node, err in answers.items() if err}
  if failed:
    node, err = sorted(failed.items())[0]
    raise ConfigError(f"{FIELD}: {url} is not reachable from {len(failed)} of {len(answers)} env "
                      f"nodes (first: {node}: {err}); set it to an address the env hosts can route to")
  return answers
