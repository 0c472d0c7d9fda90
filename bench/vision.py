"""Bench: the glasses' eyes (issue 19) — snapshot uplink, faces, OCR, recognition accuracy.

Run with ``.venv/bin/python bench/vision.py [--quick]`` (needs the ``vision`` extra and
Debian's Tesseract). Everything runs in a temporary folder, removed afterwards.

1. **uplink** — a real mesh (tests/mesh_harness: the hub in this process, the glasses' and a
   phone's edge daemons as processes, the glasses' camera the simulated folder camera): the
   hub asks the glasses for a snapshot; *capture → entry everywhere* is the time until the
   ``photo`` entry is in both devices' replicas. Same-run baseline: until the hub has read
   the snapshot (faces and text in vision.db).
2. **faces** — detection + 5-point alignment + ResNet descriptor per frame on the hub, on
   scikit-image's photographs and augmented variants. Baseline: the Haar detection alone.
3. **OCR** — Tesseract ``chi_sim+eng`` on rendered signs (English, Chinese). Baseline:
   ``eng`` alone on the English sign.
4. **recognition** — the astronaut enrolled from 4 augmented photos; held-out augmented
   photos of her must be recognised, ``camera.png`` (another person) must not.

Times are medians of wall-clock seconds; ratios are against the same-run baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cv2
import numpy as np

from bench.stats import median
from hardware.camera import encode_jpeg
from hub.vision.faces import FaceModel
from hub.vision.ocr import read_text
from hub.vision.people import Person, centroid, enrol, one_face, recognise
from tests import vision_kit as kit


def jpeg(rgb: Any) -> bytes:
    return encode_jpeg(cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2BGR), "bench").jpeg


def held_out() -> list[Any]:
    """Augmented photos of the astronaut not used to enrol her."""
    a = kit.astronaut()
    rot = cv2.warpAffine(a, cv2.getRotationMatrix2D((256, 200), 8, 1.0), (512, 512))
    return [
        kit.new_photo(),
        kit.brighter(a, 1.35),
        kit.brighter(a, 0.5),
        np.ascontiguousarray(a[40:420, 20:480]),
        np.ascontiguousarray(kit.brighter(a[0:300, 120:400], 0.9)[:, ::-1]),
        rot,
        cv2.GaussianBlur(a, (5, 5), 1.5),
        cv2.resize(a, (320, 320)),
    ]


def faces_bench(model: FaceModel, rounds: int) -> tuple[float, float, int]:
    frames = [jpeg(x) for x in [*kit.enrolment_variants(), *held_out(), kit.cameraman()]]
    model.faces(frames[0])  # load the models
    cascade = model._models()[2]
    full, detect = [], []
    for _ in range(rounds):
        for f in frames:
            t0 = time.perf_counter()
            model.faces(f)
            full.append(time.perf_counter() - t0)
            gray = cv2.cvtColor(model.decode(f), cv2.COLOR_RGB2GRAY)
            t0 = time.perf_counter()
            cascade.detectMultiScale(gray, 1.1, 5, minSize=(40, 40))
            detect.append(time.perf_counter() - t0)
    return median(full), median(detect), len(frames)


def ocr_bench(rounds: int) -> dict[str, float]:
    en = jpeg(kit.sign(kit.SIGN_EN, kit.FONT_EN))
    zh = jpeg(kit.sign(kit.SIGN_ZH, kit.FONT_ZH))
    out: dict[str, list[float]] = {"en": [], "zh": [], "en_only": []}
    ok = {"en": True, "zh": True}
    for _ in range(rounds):
        for name, image, langs in (("en", en, None), ("zh", zh, None), ("en_only", en, "eng")):
            t0 = time.perf_counter()
            text = read_text(image) if langs is None else read_text(image, langs)
            out[name].append(time.perf_counter() - t0)
            if name in ok:
                ok[name] &= (kit.SIGN_EN if name == "en" else kit.SIGN_ZH) in text
    print(f"  OCR read right: English {ok['en']}, Chinese {ok['zh']}")
    return {k: median(v) for k, v in out.items()}


def accuracy(model: FaceModel) -> tuple[int, int, int, int]:
    samples = [
        one_face(f"e{i}", model.faces(jpeg(x))) for i, x in enumerate(kit.enrolment_variants())
    ]
    done = enrol(kit.ASTRONAUT, samples)
    people = {
        kit.ASTRONAUT: Person(kit.ASTRONAUT, centroid([s.embedding for s in done.samples]), 4)
    }
    hits = 0
    positives = held_out()
    for x in positives:
        faces = model.faces(jpeg(x))
        hits += any(recognise(f.embedding, people) for f in faces)
    false = sum(1 for f in model.faces(jpeg(kit.cameraman())) if recognise(f.embedding, people))
    return hits, len(positives), false, 1


async def uplink_bench(rounds: int) -> tuple[float, float]:
    from edge_agent.timeline import device_timeline
    from provisioning.bundle import Bundle
    from tests.mesh_harness import Mesh
    from tests.waiting import poll

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folder = root / "frames"
        folder.mkdir()
        kit.write_png(kit.sign(kit.SIGN_EN, kit.FONT_EN), folder / "1.png")
        mesh = Mesh(root)
        mesh.init()
        try:
            glasses = mesh.add_device("specs", "glasses")
            phone = mesh.add_device("phone1", "phone")
            async with mesh.hub_in_process() as hub:
                await asyncio.to_thread(
                    mesh.start_edge, glasses, "--camera", str(folder), hub=mesh.hub_target
                )
                await asyncio.to_thread(mesh.start_edge, phone, hub=mesh.hub_target)
                gid = Bundle.load(glasses).device_id

                def photos(b: Path) -> int:
                    return sum(1 for e in device_timeline(Bundle.load(b)) if e.kind == "photo")

                everywhere: list[float] = []
                stored: list[float] = []
                for i in range(rounds):

                    def on_both(n: int = i) -> bool:
                        return photos(glasses) > n and photos(phone) > n

                    def read(n: int = i) -> bool:
                        return len(hub.vision.store.photos()) > n

                    t0 = time.perf_counter()
                    assert await hub.vision.capture(gid, f"bench-{i}", f"trace-bench-{i}")
                    await poll(on_both, 60, "the photo entry on both devices")
                    everywhere.append(time.perf_counter() - t0)
                    await poll(read, 60, "the photo read")
                    stored.append(time.perf_counter() - t0)
                return median(everywhere), median(stored)
        finally:
            mesh.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds")
    args = ap.parse_args()
    rounds = 1 if args.quick else 3
    model = FaceModel()
    print("vision bench (medians, seconds)")
    full, detect, n = faces_bench(model, rounds)
    print(
        f"  faces: detection+embedding per frame {full * 1000:.0f} ms "
        f"(Haar detection alone {detect * 1000:.0f} ms; ratio {full / detect:.1f}x; "
        f"{n} frames x {rounds})"
    )
    ocr = ocr_bench(rounds)
    print(
        f"  OCR chi_sim+eng: English sign {ocr['en']:.2f} s, Chinese sign {ocr['zh']:.2f} s "
        f"(eng alone on the English sign {ocr['en_only']:.2f} s; ratio "
        f"{ocr['en'] / ocr['en_only']:.1f}x)"
    )
    hits, positives, false, negatives = accuracy(model)
    print(
        f"  recognition: {hits}/{positives} held-out photos of her recognised; "
        f"{false}/{negatives} photo of someone else (camera.png) wrongly named"
    )
    everywhere, stored = asyncio.run(uplink_bench(max(2, rounds + 1)))
    print(
        f"  uplink: capture → photo entry on every device {everywhere:.2f} s "
        f"(capture → faces and text read on the hub {stored:.2f} s; "
        f"ratio {everywhere / stored:.2f}x)"
    )


if __name__ == "__main__":
    main()
