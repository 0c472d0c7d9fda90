"""First boot from a bundle: a cloud-init ``user-data`` file carrying the bundle.

Raspberry Pi OS (Bookworm and later) and Ubuntu images read ``user-data`` from the boot
partition on first boot. The file written here installs the bundle under
``/var/lib/yimi/bundle`` (mode 0700, keys 0600) and a systemd unit that runs
``yimi edge run --bundle /var/lib/yimi/bundle``; the image must carry the Yimi software
in ``/opt/yimi`` (``./scripts/setup --no-run`` from a checkout there), or ``YIMI_SOURCE``
names a git URL on the owner's own network that ``runcmd`` clones and sets up.
"""

from __future__ import annotations

import base64
import io
import tarfile
from pathlib import Path

import yaml

BUNDLE_TARGET = "/var/lib/yimi/bundle"
UNIT = """[Unit]
Description=Yimi Mesh edge agent
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/opt/yimi/.venv/bin/yimi edge run --bundle {bundle}
Restart=always
RestartSec=2

[Install]
WantedBy=multi-user.target
"""


def bundle_tarball(bundle_dir: Path) -> bytes:
    """The bundle as a gzip tar (without run-time state), modes preserved."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in sorted(bundle_dir.iterdir()):
            if path.name == "state":
                continue
            tar.add(path, arcname=path.name)
    return buf.getvalue()


def user_data(bundle_dir: Path, *, hostname: str, source: str | None = None) -> str:
    """A cloud-config document that provisions this bundle on first boot."""
    runcmd: list[str | list[str]] = [
        ["mkdir", "-p", BUNDLE_TARGET],
        ["chmod", "700", "/var/lib/yimi", BUNDLE_TARGET],
        ["tar", "-xzpf", "/var/lib/yimi/bundle.tgz", "-C", BUNDLE_TARGET],
        ["rm", "-f", "/var/lib/yimi/bundle.tgz"],
    ]
    if source:
        runcmd += [
            ["git", "clone", source, "/opt/yimi"],
            ["/opt/yimi/scripts/setup", "--no-run"],
        ]
    runcmd += [
        ["systemctl", "daemon-reload"],
        ["systemctl", "enable", "--now", "yimi-edge.service"],
    ]
    doc = {
        "hostname": hostname,
        "packages": ["python3-venv", "git"] if source else [],
        "write_files": [
            {
                "path": "/var/lib/yimi/bundle.tgz",
                "encoding": "b64",
                "permissions": "0600",
                "content": base64.b64encode(bundle_tarball(bundle_dir)).decode(),
            },
            {
                "path": "/etc/systemd/system/yimi-edge.service",
                "permissions": "0644",
                "content": UNIT.format(bundle=BUNDLE_TARGET),
            },
        ],
        "runcmd": runcmd,
    }
    return "#cloud-config\n" + yaml.safe_dump(doc, sort_keys=False, width=1_000_000)
