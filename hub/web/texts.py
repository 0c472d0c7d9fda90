"""Every text of the companion and dashboard pages, in English and Chinese (one place).

The pages fetch ``/texts.json`` and pick the language from the switch (kept in the
browser), else ``Accept-Language``; refusals from the server are keys of :data:`TEXTS`.
"""

from __future__ import annotations

LANGUAGES = ("en", "zh")

TEXTS: dict[str, tuple[str, str]] = {
    # navigation
    "app.title": ("Yimi companion", "Yimi 助手"),
    "nav.chat": ("Chat", "对话"),
    "nav.timeline": ("Timeline", "时间线"),
    "nav.cards": ("Cards", "确认卡片"),
    "nav.dashboard": ("Dashboard", "控制台"),
    "lang.switch": ("中文", "English"),
    # pairing and sessions
    "pair.title": ("Pair this browser as your phone", "将此浏览器配对为你的手机"),
    "pair.help": (
        "On the hub run 'yimi hub pair-code' and type the code here.",
        "在中枢上运行 'yimi hub pair-code'，然后在这里输入配对码。",
    ),
    "pair.code": ("Pairing code", "配对码"),
    "pair.name": ("Device name", "设备名称"),
    "pair.submit": ("Pair", "配对"),
    "pair.done": ("Paired as {name}", "已配对为 {name}"),
    "session.out": ("Signed out: pair this browser again", "已退出登录：请重新配对此浏览器"),
    "session.signing": ("Signing in with this browser's key…", "正在用此浏览器的密钥登录…"),
    # chat and timeline
    "chat.placeholder": ("Type a request", "输入请求"),
    "chat.send": ("Send", "发送"),
    "chat.pending": ("waiting to be sent", "等待发送"),
    "offline": (
        "Offline: the timeline this phone has; typed messages are sent on reconnect",
        "离线：显示本机已有的时间线；输入的消息将在重新连接后发送",
    ),
    "timeline.older": ("Older", "更早"),
    "timeline.empty": ("Nothing yet", "暂无内容"),
    # cards
    "cards.empty": ("No cards wait for you", "没有等待确认的卡片"),
    "cards.approve": ("Approve", "批准"),
    "cards.deny": ("Deny", "拒绝"),
    "cards.effect": ("Effect", "效果"),
    "cards.target": ("Target", "对象"),
    "cards.expires": ("Expires", "过期时间"),
    "cards.verify": (
        "Confirm with your fingerprint, face or PIN",
        "请用指纹、面容或 PIN 确认",
    ),
    "outcome.approved": ("Approved: done", "已批准：已执行"),
    "outcome.denied": ("Denied", "已拒绝"),
    "outcome.refused": ("Refused: {reason}", "被拒绝：{reason}"),
    "outcome.uv_failed": (
        "User verification failed: the payment is not approved",
        "用户验证失败：付款未获批准",
    ),
    # dashboard
    "dash.devices": ("Devices", "设备"),
    "dash.counters": ("Accepted and refused messages", "已接受和被拒绝的消息"),
    "dash.name": ("Name", "名称"),
    "dash.profile": ("Profile", "类型"),
    "dash.state": ("State", "状态"),
    "dash.last_seen": ("Last seen", "最后在线"),
    "dash.revoked": ("revoked", "已吊销"),
    "dash.online": ("online", "在线"),
    "dash.offline": ("offline", "离线"),
    "dash.web": ("this browser", "此浏览器"),
    "dash.never": ("never", "从未"),
    # refusals (server keys)
    "web.session_required": ("Sign in first", "请先登录"),
    "web.challenge_invalid": ("The sign-in challenge is wrong or expired", "登录质询无效或已过期"),
    "web.signature_invalid": ("The signature does not verify", "签名验证失败"),
    "web.device_revoked": ("This device is revoked", "此设备已被吊销"),
    "web.scope_missing": (
        "This device's certificate does not allow it ({scope})",
        "此设备的证书不允许此操作（{scope}）",
    ),
    "web.bad_request": ("The request is malformed", "请求格式错误"),
    "web.card_unknown": ("No such pending card", "没有这张待确认的卡片"),
    "web.not_prepared": ("Prepare the answer first", "请先准备答复"),
    "web.no_credential": (
        "This browser has no passkey registered for payments",
        "此浏览器尚未注册用于付款的通行密钥",
    ),
    "web.gateway_down": ("The capability gateway is not running", "能力网关未运行"),
    "web.utter_refused": ("This device may not make requests", "此设备不能发出请求"),
    "pair.code_invalid": (
        "The code is wrong, expired or already used",
        "配对码错误、已过期或已使用",
    ),
    "pair.rate_limited": ("Too many attempts: try again later", "尝试次数过多：请稍后再试"),
    "device.exists": ("A device with this name exists", "已有同名设备"),
    "device.name_invalid": ("Use 1-32 of a-z, 0-9, '-', '_'", "请使用 1-32 个 a-z、0-9、'-'、'_'"),
    "certificate.invalid": ("The keys were refused", "密钥被拒绝"),
    # reminders (hub/web/reminders.py, static/reminders.js)
    "nav.reminders": ("Reminders", "提醒"),
    "reminders.empty": ("No reminders", "没有提醒"),
    "reminders.move": ("Move", "改时间"),
    "reminders.cancel": ("Cancel", "取消"),
    "reminders.every": ("repeats", "重复"),
    "web.reminders_off": ("The hub keeps no reminders", "中枢没有提醒功能"),
    "web.reminder_unknown": ("No such reminder", "没有这个提醒"),
    "web.reminder_past": ("{at} has already passed", "{at}已经过去了"),
}
"""key → (English, Chinese)"""


def catalog(lang: str) -> dict[str, str]:
    """Every text in ``lang`` (English for an unknown language)."""
    i = LANGUAGES.index(lang) if lang in LANGUAGES else 0
    return {key: pair[i] for key, pair in TEXTS.items()}


def language_of(accept_language: str) -> str:
    """The first of :data:`LANGUAGES` an ``Accept-Language`` header asks for (else English)."""
    for part in accept_language.split(","):
        tag = part.split(";")[0].strip().lower()
        if tag[:2] in LANGUAGES:
            return tag[:2]
    return LANGUAGES[0]
