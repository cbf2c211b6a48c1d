"""experiments/quickstart.ipynb runs top to bottom (nbclient) with the tiny config."""
import os

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_quickstart_notebook_executes(tmp_path, monkeypatch):
  monkeypatch.setenv("MAGE_ROOT", ROOT)
  monkeypatch.setenv("QUICKSTART_WORKDIR", str(tmp_path))
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  nb = nbformat.read(os.path.join(ROOT, "experiments", "quickstart.ipynb"), as_version=4)
  NotebookClient(nb, timeout=600, kernel_name="python3",
                 resources={"metadata": {"path": os.path.join(ROOT, "experiments")}}).execute()
  outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                    for o in c.get("outputs", []))
  assert "step 6: loss" in outputs
  losses = [float(line.split("loss ")[1].split()[0]) for line in outputs.splitlines()
            if line.startswith("step ") and ": loss" in line]
  assert losses[-1] < losses[0]
  assert "image tokens" in outputs
  assert any(o.get("output_type") == "display_data" for c in nb.cells for o in c.get("outputs", []))
