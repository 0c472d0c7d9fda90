"""``yimi wake``: the device's wake word ("Yimi").

``yimi wake enroll --bundle DIR FILES…``
    make the owner's templates for this device from 3–8 WAV files, each one take of the wake
    word; ``--mic`` records the takes instead. The threshold is calibrated from the takes
    (each against the others) unless ``--threshold X`` is given. With ``--threshold`` and no
    takes, only the device's threshold is set.
``yimi wake status --bundle DIR``
    which templates the device uses (the owner's or the synthesized default), how many,
    and the threshold with where it comes from.
``yimi wake score --bundle DIR FILES…``
    the best score of each WAV file against the device's templates, and whether it fires.

Templates and settings live in the bundle's model folder (``<bundle>/models/``) and are
recorded in its model catalog with their digests.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

from cli.common import EXIT_OK, Command

log = logging.getLogger(__name__)


def _bundle(path: Path) -> Any:
    from provisioning.bundle import Bundle

    return Bundle.load(path)


def _record_takes(count: int, seconds: float, device: str | None) -> list[tuple[str, Any]]:
    """``count`` takes from the microphone, each the first speech segment heard (VAD)."""
    import numpy as np

    from hardware.audio import MicSource
    from hardware.pcm import SAMPLE_RATE
    from models.vad import Segmenter, SileroVad, SpeechEnd

    segmenter = Segmenter(SileroVad(), hangover_ms=300)

    async def record() -> list[tuple[str, Any]]:
        takes: list[tuple[str, Any]] = []
        async with MicSource(device) as mic:
            for i in range(count):
                print(f"take {i + 1}/{count}: say 'Yimi' once", file=sys.stderr, flush=True)
                segmenter.reset()
                heard, parts = 0, []
                take = None
                async for frame in mic.frames():
                    parts.append(frame.samples)
                    heard += len(frame.samples)
                    for event in segmenter.feed(frame.samples, frame.start_ms):
                        if isinstance(event, SpeechEnd):
                            take = event.samples
                    if take is not None or heard >= seconds * SAMPLE_RATE:
                        break
                if take is None:  # no segment ended in time: use what was heard
                    take = np.concatenate(parts)
                takes.append((f"mic-{i + 1}", take))
        return takes

    return asyncio.run(record())


def cmd_wake_enroll(args: argparse.Namespace) -> int:
    from hardware.audio import read_wav
    from models import wake
    from models.errors import ModelError

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    bundle = _bundle(args.bundle)
    if args.files and args.mic:
        raise ModelError("wake.no_audio")
    if not args.files and not args.mic:
        if args.threshold is None:
            raise ModelError("wake.no_audio")
        wake.write_threshold(bundle.path, wake.check_threshold(args.threshold))
        print(f"wake word threshold for {bundle.name}: {args.threshold:.3f}")
        return EXIT_OK
    if args.mic:
        takes = _record_takes(args.takes, args.seconds, args.device)
    else:
        takes = [(Path(f).name, read_wav(f)) for f in args.files]
    result = wake.enrol(bundle, takes, threshold=args.threshold)
    width = max(len(label) for label, _ in takes)
    for (label, _), score in zip(takes, result.loo_scores, strict=True):
        print(f"  {label:<{width}}  against the other takes: {score:.3f}")
    how = "given" if args.threshold is not None else "calibrated"
    print(
        f"wake word enrolled on {bundle.name}: {result.templates} templates, "
        f"threshold {result.threshold:.3f} ({how}), {result.path} (sha256 {result.sha256[:16]})"
    )
    return EXIT_OK


def cmd_wake_status(args: argparse.Namespace) -> int:
    from models import wake

    bundle = _bundle(args.bundle)
    setup = wake.setup_for(bundle)
    t = setup.templates
    print(f"device {bundle.name}: wake word {t.word!r}")
    print(f"templates: {t.source}, {len(t.frames)} from {setup.templates_path}")
    print(f"threshold: {setup.threshold:.3f} ({setup.threshold_from})")
    print(f"features:  {setup.model_path}")
    return EXIT_OK


def cmd_wake_score(args: argparse.Namespace) -> int:
    from hardware.audio import read_wav
    from models import wake

    bundle = _bundle(args.bundle)
    detector = wake.detector_for(bundle)
    fired = 0
    for f in args.files:
        samples = read_wav(f)
        score = detector.best_score(samples)
        hit = score >= detector.threshold
        fired += hit
        print(f"{score:.3f}  {'fires' if hit else '-    '}  {f}")
    print(f"{fired} of {len(args.files)} fire at threshold {detector.threshold:.3f}")
    return EXIT_OK


def add_commands(sub: Any, command: Command) -> None:
    """Register ``yimi wake`` on ``yimi``'s subparsers (``command`` is cli.main's helper)."""
    w = sub.add_parser("wake", help="the device's wake word: enrol the owner, status, score")
    w_sub = w.add_subparsers(dest="action", required=True)
    sp = command(w_sub, "enroll", cmd_wake_enroll, "make the owner's wake-word templates")
    sp.add_argument("--bundle", type=Path, required=True)
    sp.add_argument("files", nargs="*", help="WAV files, each one take of the wake word")
    sp.add_argument("--mic", action="store_true", help="record the takes from the microphone")
    sp.add_argument("--takes", type=int, default=4, help="takes to record with --mic (3–8)")
    sp.add_argument("--seconds", type=float, default=4.0, help="longest wait per --mic take")
    sp.add_argument("--device", help="input device for --mic (sounddevice name or index)")
    sp.add_argument(
        "--threshold", type=float, help="fire at this score (0.5–1); default: calibrated"
    )
    sp = command(w_sub, "status", cmd_wake_status, "templates and threshold of this device")
    sp.add_argument("--bundle", type=Path, required=True)
    sp = command(w_sub, "score", cmd_wake_score, "score WAV files against this device's word")
    sp.add_argument("--bundle", type=Path, required=True)
    sp.add_argument("files", nargs="+")
