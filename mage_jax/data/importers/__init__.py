"""Importers from formats users already have into native Episodes (docs/data.md, "Importers").

One module per format family, each yielding `Episode | SkippedItem` per record (a counted
skip, never a lost record):
- chat.py: OpenAI / ShareGPT / ms-swift / LLaMA-Factory tool-call transcripts;
- agentnet.py: AgentNet (OpenCUA) trajectories with PyAutoGUI actions;
- grounding.py: grounding samples (generic, ScreenSpot-v2, OSWorld-G) as stage-1 data, and the
  hit test the grounding evaluation uses;
- fill.py: the template for think / Action text a source lacks (marked in meta["filled"]);
- sources.py: JSON Lines or JSON array input files.
"""
from mage_jax.data.importers.agentnet import agentnet_episode, read_agentnet_file
from mage_jax.data.importers.chat import episode_from_messages, read_messages_file
from mage_jax.data.importers.grounding import (grounding_episode, hits, osworld_g_episode,
                                               read_grounding_file, read_osworld_g_file,
                                               read_screenspot_file, screenspot_episode)

__all__ = ["agentnet_episode", "episode_from_messages", "grounding_episode", "hits",
           "osworld_g_episode", "read_agentnet_file", "read_grounding_file", "read_messages_file",
           "read_osworld_g_file", "read_screenspot_file", "screenspot_episode"]
