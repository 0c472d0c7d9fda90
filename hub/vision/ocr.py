"""Text in a snapshot, read locally by Tesseract (Debian ``tesseract-ocr``, ``chi_sim`` and
``eng``) as a subprocess: the image on its stdin, the text on its stdout."""

from __future__ import annotations

import logging
import re
import shutil
import subprocess

from hub.vision.errors import VisionError

log = logging.getLogger(__name__)

LANGUAGES = "chi_sim+eng"
TIMEOUT_S = 30.0
_CJK_GAP = re.compile(r"(?<=[\u3400-\u9fff])\s+(?=[\u3400-\u9fff])")


def tesseract() -> str:
    path = shutil.which("tesseract")
    if path is None:
        raise VisionError("vision.ocr_missing", reason="no tesseract on PATH")
    return path


def clean(text: str) -> str:
    """Lines of OCR output joined, blank ones dropped; spaces Tesseract puts between Chinese
    characters removed."""
    lines = [" ".join(line.split()) for line in text.splitlines()]
    return _CJK_GAP.sub("", " ".join(line for line in lines if line)).strip()


def read_text(image: bytes, languages: str = LANGUAGES) -> str:
    """The text Tesseract reads in ``image`` (JPEG or PNG bytes), cleaned; ``""`` for none."""
    try:
        proc = subprocess.run(
            [tesseract(), "stdin", "stdout", "-l", languages, "--psm", "3"],
            input=image,
            capture_output=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise VisionError("vision.ocr_failed", reason=f"over {TIMEOUT_S:.0f} s") from exc
    if proc.returncode != 0:
        reason = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
        raise VisionError("vision.ocr_failed", reason=reason[0][:200])
    return clean(proc.stdout.decode(errors="replace"))
