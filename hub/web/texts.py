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
    "nav.notes": ("Notes", "笔记"),
    "nav.memory": ("Memory", "记忆"),
    "nav.settings": ("Models", "模型"),
    # notes
    "notes.placeholder": ("Write a note", "写一条笔记"),
    "notes.add": ("Add", "添加"),
    "notes.kind_note": ("note", "笔记"),
    "notes.kind_todo": ("to-do", "待办"),
    "notes.empty": ("No notes yet", "还没有笔记"),
    # memory
    "memory.placeholder": ("What do I remember about…", "我记得关于……的什么"),
    "memory.search": ("Search", "搜索"),
    "memory.none": ("Nothing remembered matches", "没有匹配的记忆"),
    "memory.explain": ("Explain", "解释"),
    "memory.forget": ("Forget", "忘记"),
    "memory.sources": ("Sources", "来源"),
    "memory.versions": ("Versions", "版本"),
    "memory.dependents": ("Depends on it", "依赖于它"),
    "memory.plan_title": ("Forgetting this deletes:", "忘记此项将删除："),
    "memory.plan_assertion": (
        "the memory {id} (every version; a tombstone stays)",
        "记忆 {id}（所有版本；保留删除标记）",
    ),
    "memory.plan_derived": ("derived {id}", "派生内容 {id}"),
    "memory.plan_rederive": (
        "derived {id} (derived again without it)",
        "派生内容 {id}（将不含它重新派生）",
    ),
    "memory.plan_source": ("source {source}", "来源 {source}"),
    "memory.plan_index": ("recall index entry {id}", "检索索引条目 {id}"),
    "memory.plan_not_claimed": (
        "Not deleted: timeline entries, archived originals and backups",
        "不会删除：时间线条目、归档原件和备份",
    ),
    "memory.confirm_forget": ("Forget it", "确认忘记"),
    "memory.cancel": ("Cancel", "取消"),
    "memory.forgotten": ("Forgot {id}: {count} things deleted", "已忘记 {id}：删除了 {count} 项"),
    # model and brain switches
    "settings.models": ("Models", "模型"),
    "settings.brain": ("Brain", "大脑"),
    "settings.switch": ("Switch", "切换"),
    "settings.rule_based": ("Built-in rule-based model", "内置规则模型"),
    "settings.endpoint": ("An OpenAI-compatible endpoint", "兼容 OpenAI 的端点"),
    "settings.base_url": ("Endpoint URL", "端点 URL"),
    "settings.model": ("Model", "模型"),
    "settings.confirm_help": (
        "Confirm this change with this phone's key:",
        "用本机的密钥确认此更改：",
    ),
    "settings.confirm": ("Confirm", "确认"),
    "settings.done": ("Confirmed: {outcome}", "已确认：{outcome}"),
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
    "passkey.setup": ("Set up this phone's passkey", "设置本机的通行密钥"),
    "passkey.help": (
        'Payments and "it\'s me" need your fingerprint, face or PIN: set up a passkey first',
        "付款和“是我本人”需要指纹、面容或 PIN：请先设置通行密钥",
    ),
    "passkey.done": ("Passkey set up", "通行密钥已设置"),
    "passkey.busy": (
        "Waiting for your fingerprint, face or PIN…",
        "正在等待你的指纹、面容或 PIN…",
    ),
    "trust.button": ("It's me for the next minute", "接下来一分钟是我本人"),
    "trust.open": (
        "Voice trust window open until {until}: a call you start before then is yours",
        "语音信任窗口开放至 {until}：在此之前开始的通话视为你本人",
    ),
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
    "dash.pair": ("New pair code", "新配对码"),
    "dash.pair_code": (
        "Pair code {code}, valid once until {until}",
        "配对码 {code}，仅可使用一次，有效至 {until}",
    ),
    "dash.revoke": ("Revoke", "吊销"),
    "dash.revoke_confirm": (
        "Revoke {name}? It is signed out at once.",
        "吊销 {name}？它会立即被登出。",
    ),
    "dash.revoked_done": ("{name} revoked", "{name} 已被吊销"),
    "dash.packages": ("Packages", "功能包"),
    "dash.running": ("running", "运行中"),
    "dash.failed": ("failed", "失败"),
    "dash.loaded": ("loaded", "已加载"),
    "dash.models": ("Models", "模型"),
    "dash.role": ("Role", "角色"),
    "dash.selected": ("Selected", "已选择"),
    "dash.effective": ("Effective", "生效中"),
    "dash.progress": ("Progress", "进度"),
    "dash.error": ("Error", "错误"),
    "dash.brain": ("Brain providers", "大脑服务提供方"),
    "dash.brain_builtin": (
        "The built-in rule-based model (no endpoint configured)",
        "内置规则模型（未配置端点）",
    ),
    "dash.prefer_local": ("Commands handled locally first", "命令优先在本地处理"),
    "dash.payments": ("Payments", "付款"),
    "dash.amount": ("Amount", "金额"),
    "dash.payee": ("Payee", "收款方"),
    "dash.audit": ("Audit log", "审计日志"),
    "dash.audit_ok": (
        "Verified: {records} records, chain and signed head intact",
        "验证通过：{records} 条记录，链和签名头完整",
    ),
    "dash.audit_bad": (
        "Verification FAILED at line {line}: {problem}",
        "验证失败，第 {line} 行：{problem}",
    ),
    "dash.none": ("none", "无"),
    "dash.operator_only": (
        "Only the owner's phone sees these panels",
        "只有主人的手机能看到这些面板",
    ),
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
    "web.uv_failed": (
        "User verification failed: nothing was opened",
        "用户验证失败：未开放任何权限",
    ),
    "web.trust_unavailable": (
        "This device cannot open a voice trust window",
        "此设备无法开放语音信任窗口",
    ),
    "web.operator_unavailable": ("The operator panels are not running", "管理面板未运行"),
    "web.unavailable": ("This is not running on the hub", "中枢上未运行此功能"),
    "web.action_refused": ("Refused: {reason}", "被拒绝：{reason}"),
    "web.plan_changed": (
        "What would be deleted has changed: look at the plan again",
        "将被删除的内容已变化：请重新查看计划",
    ),
    "device.unknown": ("No device named {name}", "没有名为 {name} 的设备"),
    # card refusal reasons the hub gives in English (REASON_KEYS maps them here)
    "reason.locked": (
        "the phone was locked: unlock it and approve again",
        "手机已锁定：请解锁后再次批准",
    ),
    "reason.no_lock_state": (
        "no lock state reported: answer payment cards with 'yimi pay approve'",
        "未报告锁定状态：请用 'yimi pay approve' 答复付款卡片",
    ),
    "reason.future": ("the approval is signed in the future", "批准的签名时间在未来"),
    "reason.auth_mismatch": (
        "the card does not match its authorisation",
        "卡片与其授权不一致",
    ),
    "reason.other_payment": (
        "the approval is for another payment (payee, amount, currency or nonce differ)",
        "此批准属于另一笔付款（收款方、金额、币种或随机数不同）",
    ),
    "reason.not_waiting": (
        "the payment is no longer waiting for approval",
        "这笔付款已不再等待批准",
    ),
    "reason.no_auth": ("no authorisation behind this card", "此卡片没有对应的授权"),
    "reason.revoked": ("the device is revoked", "此设备已被吊销"),
    "reason.not_phone": (
        "payments are approved only on the owner's phone",
        "付款只能在主人的手机上批准",
    ),
    "reason.may_not_answer": ("this device may not answer cards", "此设备不能答复卡片"),
    "reason.bad_signature": ("bad signature", "签名无效"),
    "reason.other_device": ("signed by another device", "由另一台设备签名"),
    "reason.unknown_card": ("unknown card", "未知卡片"),
    "reason.answered": ("card already answered", "卡片已被答复"),
    "reason.changed": (
        "the approval is for another action (changed content)",
        "此批准属于另一项操作（内容已更改）",
    ),
    "reason.nonce": (
        "expiry or nonce does not match the card",
        "过期时间或随机数与卡片不符",
    ),
    "reason.expired": ("expired", "已过期"),
    "reason.auto_undo": (
        "an auto-payment pays by itself: deny its card to undo it",
        "自动付款会自行支付：拒绝其卡片即可撤销",
    ),
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
    # worldlines (hub/web/worldlines.py, static/worldlines.js)
    "nav.worldlines": ("Versions", "版本"),
    "worldlines.empty": ("No changes waiting", "没有待定的改动"),
    "worldlines.show": ("Show changes", "查看改动"),
    "worldlines.commit": ("Commit", "采用"),
    "worldlines.discard": ("Discard", "丢弃"),
    "worldlines.stale": ("the folder changed since", "之后文件夹已改变"),
    "worldlines.no_changes": ("No changes", "没有改动"),
    "worldlines.card": ("Confirm it in Cards", "请在确认卡片中确认"),
    "web.worldline_package": ("{package} keeps no versions", "{package} 没有版本"),
    "web.worldline_failed": ("The version could not change: {reason}", "版本无法改动：{reason}"),
}
"""key → (English, Chinese)"""

REASON_KEYS: dict[str, str] = {
    en: key for key, (en, _) in TEXTS.items() if key.startswith("reason.")
}
"""a card refusal's English reason (as the consent and payment authorities give it) → its key"""


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
