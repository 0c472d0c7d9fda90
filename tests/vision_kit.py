"""Test photographs for the vision tests and the bench: real faces from scikit-image's
sample images (``astronaut.png``: Eileen Collins; ``camera.png``: the cameraman), augmented
(crops, flips, brightness), and signs of rendered text (DejaVu Sans, WenQuanYi Zen Hei)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

FONT_EN = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
FONT_ZH = Path("/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc")
SIGN_EN = "CORNER BOOKSHOP"
SIGN_ZH = "街角书店"
ASTRONAUT = "Eileen"


def astronaut() -> Any:
    from skimage import data

    return data.astronaut()


def cameraman() -> Any:
    from skimage import data

    return np.stack([data.camera()] * 3, axis=-1)


def brighter(rgb: Any, factor: float) -> Any:
    return np.clip(rgb.astype(np.float32) * factor, 0, 255).astype(np.uint8)


def enrolment_variants() -> list[Any]:
    """Four photos of the astronaut to name her from."""
    a = astronaut()
    return [
        a,
        np.ascontiguousarray(a[:, ::-1]),
        brighter(a[10:430, 40:460], 0.75),
        brighter(np.ascontiguousarray(a[30:380, 80:400][:, ::-1]), 1.2),
    ]


def new_photo() -> Any:
    """A photo of the astronaut not among the enrolment ones: another crop, darker, flipped."""
    a = astronaut()
    return brighter(np.ascontiguousarray(a[0:360, 100:440][:, ::-1]), 0.6)


def sign(text: str, font: Path, size: int = 64) -> Any:
    from PIL import Image, ImageDraw, ImageFont

    f = ImageFont.truetype(str(font), size)
    left, top, right, bottom = f.getbbox(text)
    box = (int(right - left) + 80, int(bottom - top) + 80)
    img = Image.new("RGB", box, (245, 240, 225))
    ImageDraw.Draw(img).text((40 - left, 40 - top), text, font=f, fill=(20, 20, 20))
    return np.asarray(img)


def write_png(rgb: Any, path: Path) -> Path:
    from PIL import Image

    Image.fromarray(rgb).save(path)
    return path


def enrolment_files(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [write_png(v, folder / f"eileen-{i}.png") for i, v in enumerate(enrolment_variants())]
