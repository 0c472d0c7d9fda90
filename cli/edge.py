"""``yimi edge run`` (the device daemon) and ``yimi say`` (one typed utterance)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

from cli.common import EXIT_USAGE, Command, run_service, setup_logging


def cmd_edge_run(args: argparse.Namespace) -> int:
    from edge_agent.daemon import VoiceOptions, run_edge
    from provisioning.bundle import Bundle

    setup_logging(args.verbose)
    bundle = Bundle.load(args.bundle)
    voice = None
    if args.wyoming_satellite is not None:
        if (
            args.audio is not None
            or args.out
            or args.realtime
            or args.audio_start_ms is not None
            or args.once
        ):
            print(
                "yimi: --wyoming-satellite is the microphone and speaker (a live stream): "
                "no --audio, --out, --realtime, --audio-start-ms or --once",
                file=sys.stderr,
            )
            return EXIT_USAGE
        voice = VoiceOptions(audio="", satellite=args.wyoming_satellite)
    elif args.audio is not None:
        voice = VoiceOptions(
            audio=args.audio,
            out=args.out,
            realtime=args.realtime,
            start_ms=args.audio_start_ms,
            once=args.once,
            timeout=args.timeout,
        )
    elif args.out or args.realtime or args.audio_start_ms is not None or args.once:
        print("yimi: --out, --realtime, --audio-start-ms and --once need --audio", file=sys.stderr)
        return EXIT_USAGE
    return run_service(
        lambda: run_edge(bundle, hub=args.hub, voice=voice, camera=args.camera, imu=args.imu)
    )


def cmd_say(args: argparse.Namespace) -> int:
    from edge_agent.say import say
    from provisioning.bundle import Bundle

    setup_logging(args.verbose, default=logging.ERROR)  # the outcome is one line on its own
    bundle = Bundle.load(args.bundle)
    return asyncio.run(say(bundle, " ".join(args.text), hub=args.hub, timeout=args.timeout))


def add_commands(sub: Any, command: Command) -> None:
    """Register ``yimi edge …`` and ``yimi say``."""
    edge = sub.add_parser("edge", help="run the device daemon")
    edge_sub = edge.add_subparsers(dest="action", required=True)
    sp = command(edge_sub, "run", cmd_edge_run, "run the edge agent for a bundle")
    sp.add_argument("--bundle", type=Path, required=True)
    sp.add_argument("--hub", help="HOST:PORT of the hub's gRPC (default: zeroconf)")
    sp.add_argument(
        "--audio", help="hear: mic, mic:DEVICE, - (raw s16le 16 kHz mono on stdin) or a file"
    )
    sp.add_argument(
        "--wyoming-satellite",
        metavar="HOST:PORT",
        help="hear and speak through a wyoming-satellite (connects to it as Home Assistant "
        "would; Yimi's wake word, VAD and voiceprint run here)",
    )
    sp.add_argument(
        "--camera",
        help="see (only when the owner asks): cam, cam:INDEX, an image, a folder of frames "
        "(one per snapshot, in name order) or a video file",
    )
    sp.add_argument(
        "--imu",
        help="glasses: a nod or a shake answers the card on the HUD; the head's IMU: device, "
        "or a recording (CSV t_ms,pitch,yaw,roll, replayed for each card shown)",
    )
    sp.add_argument("--out", help="speak replies into: speaker, speaker:DEVICE, null or a WAV file")
    sp.add_argument("--realtime", action="store_true", help="pace a file like a microphone")
    sp.add_argument(
        "--audio-start-ms",
        type=int,
        help="wall clock (ms since the epoch) of the file's first sample; with --realtime, "
        "hearing starts then",
    )
    sp.add_argument(
        "--once", action="store_true", help="exit when the audio ended and replies are in"
    )
    sp.add_argument(
        "--timeout", type=float, default=60.0, help="--once: seconds to wait for the replies"
    )

    sp = command(sub, "say", cmd_say, "send a typed utterance and print the reply")
    sp.add_argument("--bundle", type=Path, required=True)
    sp.add_argument("--hub", help="HOST:PORT of the hub's gRPC (default: zeroconf)")
    sp.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for the reply")
    sp.add_argument("text", nargs="+")
