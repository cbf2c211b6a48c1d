"""The action contract between the model's text and the rest of the code.

`schema` defines the agent's two tools and validates calls, `parsing` turns
model text into one validated call, `keys` normalises key names, `pyautogui` reads
PyAutoGUI code (recorded trajectories, OSWorld set-up steps) as computer_use calls. `data/` and
`agent/` both import this package; it imports neither.
"""
