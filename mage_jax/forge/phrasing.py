"""Seed-varying instruction phrasing without a model: a seeded frame around the skill's
instruction ("Your task: ...", "Instructions: ..."), chosen by (skill id, seed). The frames add
no value, file, number or meaning word, so every framed instruction passes the consistency gate
(forge/consistency.py; tests/test_forge_phrasing.py checks every skill); the phrase node still
runs the gate and keeps the bare instruction if a frame ever fails it. De-duplication compares
instructions with the frame taken off (`unframe`), so two frames of one task stay one task.
Deeper rewording is the LLM reword node's, through the same gate.
"""
from __future__ import annotations

import random

FRAMES = ("", "Task: ", "Your task: ", "Please do the following. ", "Here is what needs doing: ",
          "Instructions: ", "Assignment: ", "Job for you. ", "To do: ", "Request: ")


def frame(instruction: str, skill_id: str, seed: int) -> str:
  return random.Random(f"phrase:{skill_id}:{seed}").choice(FRAMES) + instruction


def unframe(instruction: str) -> str:
  for f in FRAMES:
    if f and instruction.startswith(f):
      return instruction[len(f):]
  return instruction
