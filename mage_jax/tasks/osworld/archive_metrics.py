"""OSWorld's compare_archive (our code): two archives (zip or tar, as bytes) hold the same entries
under `file_path`, and the files compare by `file_type` with the matching document metric; the score
is the mean over the files. File types: text, pdf, docx, ppt, image, csv, table (FILE_TYPES); audio
and video are refused at import (no audio/video comparison here).
"""
from __future__ import annotations

import io
import posixpath
import tarfile
import zipfile
from typing import Any, Callable

FILE_TYPES = ("text", "pdf", "docx", "ppt", "image", "csv", "table")
METRIC_OF = {"text": "compare_text_file", "pdf": "compare_pdfs", "docx": "compare_docx_files",
             "ppt": "compare_pptx_files", "image": "compare_images", "csv": "compare_csv", "table": "compare_table"}


def members(data: bytes) -> dict[str, bytes]:
  """{path: bytes} of the archive's regular files."""
  if zipfile.is_zipfile(io.BytesIO(data)):
    with zipfile.ZipFile(io.BytesIO(data)) as z:
      return {i.filename: z.read(i) for i in z.infolist() if not i.is_dir()}
  with tarfile.open(fileobj=io.BytesIO(data)) as t:
    return {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}


def entries(files: dict[str, bytes], folder: str) -> dict[str, bytes | None]:
  """The entries directly under `folder` (a sub-folder's entry maps to None), like os.listdir."""
  prefix = posixpath.normpath(folder) + "/" if folder.strip("/.") else ""
  out: dict[str, bytes | None] = {}
  for path, data in files.items():
    if path.startswith(prefix):
      head, sep, _ = path[len(prefix):].partition("/")
      out[head] = None if sep else data
  return out


def compare_archive(result: bytes | None, expected: bytes | None, metrics: dict[str, Callable[..., float]],
                    file_path: str = "", file_type: str = "text", **options: Any) -> float:
  if not result or not expected:
    return 0.0
  try:
    got, want = entries(members(result), file_path), entries(members(expected), file_path)
  except (zipfile.BadZipFile, tarfile.TarError, OSError):
    return 0.0
  if sorted(got) != sorted(want) or not got:
    return 0.0
  compare = metrics[METRIC_OF[file_type]]
  return sum(float(compare(got[n], want[n], **options)) if got[n] is not None and want[n] is not None else 0.0
             for n in sorted(got)) / len(got)
