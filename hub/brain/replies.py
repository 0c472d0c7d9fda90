"""Every sentence the offline brain says, in English and Chinese, in one place.

A reply is a stable key and its fields: :func:`say` picks the template of the turn's
language (``"en"`` / ``"zh"``; anything else falls back to English) and fills it in. Keys
never change meaning; tests and other code refer to them, not to the words.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

Templates = dict[str, dict[str, str]]

REPLIES: Templates = {
    # ------------------------------------------------------------ general
    "report.no_tool": {"en": "No tool was used for this job.", "zh": "这项工作没有用到任何工具。"},
    "already": {"en": "(already answered)", "zh": "（已经回答过了）"},
    "nevermind": {"en": "OK.", "zh": "好的。"},
    # the glasses' camera (hub/vision)
    "photo.taking": {"en": "Taking a picture.", "zh": "好的，拍照。"},
    "photo.no_camera": {
        "en": "This device has no camera I can reach; no picture was taken.",
        "zh": "这台设备没有可用的摄像头，没有拍照。",
    },
    "photo.owner_only": {
        "en": "Only the owner can ask for a picture; none was taken.",
        "zh": "只有主人可以让我拍照，没有拍照。",
    },
    "not_yet.vision": {
        "en": "Not yet: pictures come with the hub's vision. Nothing was taken.",
        "zh": "还不行：拍照要等视觉功能上线。没有拍照。",
    },
    "seen.text": {"en": "The photo from {time} said: {text}", "zh": "{time}的照片上写着：{text}"},
    "seen.no_text": {
        "en": "None of the recent photos had text I could read.",
        "zh": "最近的照片上没有我能读出的文字。",
    },
    "named.known": {
        "en": "Noted: that is {name}. I'll recognise {name} on your photos from now on.",
        "zh": "记下了：这是{name}。以后照片里我会认出{name}。",
    },
    "named.more": {
        "en": "Noted: that is {name} ({count} of {needed} photos; a few more and I'll "
        "recognise {name}).",
        "zh": "记下了：这是{name}（{count}/{needed} 张照片，再多几张我就能认出{name}）。",
    },
    "seen.people": {"en": "On your photos: {people}.", "zh": "照片里有：{people}。"},
    "seen.nobody": {
        "en": "I recognised nobody you named on the recent photos.",
        "zh": "最近的照片里没有认出你命名过的人。",
    },
    # the hub's own words to a Wyoming peer (hub/voice/wyoming.py), spoken by Home Assistant
    "wyoming.reply_late": {
        "en": "This is taking longer than {seconds} seconds; the answer will be on your timeline.",
        "zh": "这需要超过 {seconds} 秒，答复会出现在你的时间线上。",
    },
    "wyoming.turn_failed": {
        "en": "Something went wrong on the hub; please ask again.",
        "zh": "中枢出了点问题，请再说一遍。",
    },
    "help": {
        "en": "Here is what I can do: remember something for you and tell you what I remember "
        "(or forget it); e-mail a contact; turn devices on or off, dim lights, set blinds and "
        "volume, tell you a device's state; read your timeline for today, yesterday or last "
        "week; keep your shopping and to-do lists; tell the time and the date; order from a "
        'shop, "pay it" and "undo".',
        "zh": "我能做的有：帮你记住事情、告诉你我记得什么（或者忘掉）；给联系人发邮件；开关设备、"
        "调灯光亮度、窗帘位置和音量、告诉你设备的状态；读你今天、昨天或上周的时间线；管理购物清单"
        "和待办事项；告诉你现在的时间和日期；从店里点餐、“付款”和“撤销”。",
    },
    "unknown": {
        "en": "I can't do that yet — here is what I can do: remember and recall things, e-mail "
        "a contact, control your devices, read your timeline, keep your shopping and to-do "
        "lists, tell the time and date, and order food.",
        "zh": "这个我还做不到。我能做的有：记住和回想事情、给联系人发邮件、控制设备、读时间线、"
        "管理购物清单和待办事项、告诉你时间和日期、点餐。",
    },
    "heard": {"en": "I heard: {heard}.", "zh": "我听到的是：{heard}。"},
    "not_yet.timer": {
        "en": "Not yet: timers come with the scheduler. Nothing was set.",
        "zh": "还不行：计时器要等调度功能上线。没有设置任何计时器。",
    },
    # ------------------------------------------------------------ timers
    "timer.label": {"en": "timer", "zh": "计时器"},
    "timer.label_named": {"en": "{name} timer", "zh": "{name}计时器"},
    "timer.started": {
        "en": "{Label} set for {duration}.",
        "zh": "好的，{duration}的{label}开始了。",
    },
    "timer.none": {"en": "No timer is running here.", "zh": "这里没有正在运行的计时器。"},
    "timer.none_named": {"en": "There is no {label} here.", "zh": "这里没有{label}。"},
    "timer.which": {
        "en": "Which timer? Running here: {names}.",
        "zh": "哪个计时器？这里有：{names}。",
    },
    "timer.cancelled": {"en": "Cancelled the {label}.", "zh": "已取消{label}。"},
    "timer.paused": {
        "en": "Paused the {label}: {remaining} left.",
        "zh": "{label}已暂停，还剩{remaining}。",
    },
    "timer.not_running": {"en": "The {label} is not paused.", "zh": "{label}没有暂停。"},
    "timer.already_paused": {"en": "The {label} is already paused.", "zh": "{label}已经暂停了。"},
    "timer.resumed": {
        "en": "Resumed the {label}: {remaining} left.",
        "zh": "{label}继续计时，还剩{remaining}。",
    },
    "timer.changed": {
        "en": "The {label} now has {remaining} left.",
        "zh": "{label}现在还剩{remaining}。",
    },
    "timer.left": {
        "en": "{Label}: {remaining} left{paused}",
        "zh": "{label}还剩{remaining}{paused}",
    },
    "timer.paused_mark": {"en": " (paused)", "zh": "（已暂停）"},
    "timer.status": {"en": "{lines}.", "zh": "{lines}。"},
    "timer.ring": {
        "en": "Time's up: your {label} for {duration} is done.",
        "zh": "时间到：{duration}的{label}结束了。",
    },
    # ------------------------------------------------------------ reminders
    "reminder.set": {
        "en": "OK, I'll remind you {when} to {what}.",
        "zh": "好的，{when}提醒你{what}。",
    },
    "reminder.when": {
        "en": "When should I remind you to {what}? Nothing was set.",
        "zh": "什么时候提醒你{what}？还没有设置提醒。",
    },
    "reminder.past": {
        "en": "{when} has already passed: nothing was set.",
        "zh": "{when}已经过去了，没有设置提醒。",
    },
    "reminder.none": {"en": "You have no reminders.", "zh": "你没有提醒。"},
    "reminder.none_match": {
        "en": "You have no reminder to {what}.",
        "zh": "你没有关于{what}的提醒。",
    },
    "reminder.list": {"en": "Your reminders: {lines}.", "zh": "你的提醒有：{lines}。"},
    "reminder.item": {"en": "{when}, {what}", "zh": "{when}{what}"},
    "reminder.which": {"en": "Which reminder? {lines}.", "zh": "哪个提醒？{lines}。"},
    "reminder.cancelled": {
        "en": "Cancelled the reminder to {what}.",
        "zh": "已取消提醒：{what}。",
    },
    "reminder.moved": {
        "en": "OK, I'll remind you {when} to {what} instead.",
        "zh": "好的，改成{when}提醒你{what}。",
    },
    "reminder.move_when": {
        "en": "To when should I move the reminder? Nothing was changed.",
        "zh": "要把提醒改到什么时候？没有改动。",
    },
    # ------------------------------------------------------------ watches
    "watch.home": {
        "en": "You asked to know when {what}: it just did.",
        "zh": "你让我留意的事发生了：{what}。",
    },
    "watch.timeline": {"en": "Watch “{what}”: {text}", "zh": "你让我留意的“{what}”：{text}"},
    "watch.set": {
        "en": "OK, I'll tell you when {what}.",
        "zh": "好的，{what}的时候告诉你。",
    },
    "watch.timeline_set": {
        "en": "OK, I'll tell you when the timeline mentions {what}.",
        "zh": "好的，时间线上出现“{what}”时告诉你。",
    },
    # ------------------------------------------------------------ the morning briefing
    "briefing.head": {"en": "Good morning. {parts}", "zh": "早上好。{parts}"},
    "briefing.reminders": {
        "en": "Today's reminders: {lines}.",
        "zh": "今天的提醒：{lines}。",
    },
    "briefing.no_reminders": {"en": "No reminders today.", "zh": "今天没有提醒。"},
    "briefing.item": {"en": "{time}, {what}", "zh": "{time}{what}"},
    "briefing.timeline": {
        "en": "Since yesterday: {count} on the timeline, the latest: {lines}.",
        "zh": "昨天以来时间线上有{count}条，最新的：{lines}。",
    },
    "briefing.quiet": {"en": "Nothing new on the timeline.", "zh": "时间线上没有新内容。"},
    "briefing.cards": {
        "en": "{count} waiting for your approval in the companion: {titles}.",
        "zh": "手机助手里有{count}张卡片等你确认：{titles}。",
    },
    "briefing.no_cards": {"en": "No cards wait for you.", "zh": "没有等你确认的卡片。"},
    "run.set": {
        "en": "OK: {when}, I'll {what}.",
        "zh": "好的：{when}，我会{what}。",
    },
    "run.blocked": {
        "en": "Needs you: open the companion. The scheduled “{what}” was not done: it needs "
        "your approval, and a scheduled run never asks when nobody is there.",
        "zh": "需要你：请打开手机助手。定时任务“{what}”没有执行：它需要你的批准，"
        "定时任务不会在没人的时候弹出确认卡片。",
    },
    "run.done": {"en": "Scheduled “{what}”: {result}", "zh": "定时任务“{what}”：{result}"},
    "refused.scheduled": {
        "en": "it needs you: open the companion",
        "zh": "这需要你本人：请打开手机助手",
    },
    "reminder.due": {"en": "Reminder: {what}.", "zh": "提醒：{what}。"},
    "reminder.missed": {
        "en": "Missed while the hub was off: the reminder to {what} ({when}).",
        "zh": "中枢关机时错过了一个提醒：{what}（{when}）。",
    },
    "not_yet.reminder": {
        "en": "Not yet: reminders need the hub's scheduler. Nothing was set.",
        "zh": "还不行：提醒需要中枢的调度功能。没有设置任何提醒。",
    },
    "not_yet.watch": {
        "en": "Not yet: watching needs the hub's scheduler. Nothing was set.",
        "zh": "还不行：留意需要中枢的调度功能。没有设置任何留意。",
    },
    "when.today": {"en": "today at {time}", "zh": "今天{time}"},
    "when.tomorrow": {"en": "tomorrow at {time}", "zh": "明天{time}"},
    "when.weekday": {"en": "on {day} at {time}", "zh": "{day}{time}"},
    "when.date": {"en": "on {date} at {time}", "zh": "{date}{time}"},
    "when.daily": {"en": "every day at {time}", "zh": "每天{time}"},
    "when.weekdays": {"en": "every weekday at {time}", "zh": "每个工作日{time}"},
    "when.weekends": {"en": "every weekend at {time}", "zh": "每个周末{time}"},
    "when.weekly": {"en": "every {days} at {time}", "zh": "每{days}{time}"},
    "duration.hours": {"en": "{n} hour", "zh": "{n}小时"},
    "duration.hours_n": {"en": "{n} hours", "zh": "{n}小时"},
    "duration.minutes": {"en": "{n} minute", "zh": "{n}分钟"},
    "duration.minutes_n": {"en": "{n} minutes", "zh": "{n}分钟"},
    "duration.seconds": {"en": "{n} second", "zh": "{n}秒"},
    "duration.seconds_n": {"en": "{n} seconds", "zh": "{n}秒"},
    # ------------------------------------------------------------ receipts (generic)
    "said.waiting": {
        "en": "To {what}, I need your approval: there is a card on your phone.",
        "zh": "要{what}，需要你批准：手机上有一张确认卡片。",
    },
    "said.rejected": {"en": "I may not {what} here: {why}.", "zh": "这里不允许{what}：{why}。"},
    "said.partial": {
        "en": "I tried to {what}, but only part of it is confirmed.",
        "zh": "我试着{what}，但只确认了一部分。",
    },
    "said.unknown": {
        "en": "I tried to {what}; whether it worked is not confirmed.",
        "zh": "我试着{what}，但无法确认是否成功。",
    },
    "said.failed": {"en": "I could not {what}: {why}.", "zh": "我没能{what}：{why}。"},
    "refused": {"en": "refused", "zh": "被拒绝"},
    "refused.scope": {
        "en": "only the owner's own voice or devices can do that",
        "zh": "只有主人本人的声音或设备才能这样做",
    },
    # what an action is, for the sentences above
    "act.remember": {"en": "remember that", "zh": "记住这件事"},
    "act.recall": {"en": "look that up", "zh": "查这件事"},
    "act.forget": {"en": "forget that", "zh": "忘掉这件事"},
    "act.devices": {"en": "see your devices", "zh": "查看你的设备"},
    "act.device": {"en": "change {name}", "zh": "调整{name}"},
    "act.device_on": {"en": "turn on {name}", "zh": "打开{name}"},
    "act.device_off": {"en": "turn off {name}", "zh": "关闭{name}"},
    "act.state": {"en": "read {name}", "zh": "读取{name}"},
    "act.send": {"en": "e-mail {who}", "zh": "给{who}发邮件"},
    "act.list_add": {"en": "add {item} to the list", "zh": "把{item}加到清单"},
    "act.list_done": {"en": "check {item} off the list", "zh": "把{item}从清单上勾掉"},
    "act.list_read": {"en": "read the list", "zh": "读清单"},
    # ------------------------------------------------------------ memory
    "remember.done": {"en": "I'll remember: {fact}.", "zh": "好的，我记住了：{fact}。"},
    "recall.none": {"en": "I have nothing about {query}.", "zh": "关于{query}，我没有记下什么。"},
    "recall.found": {
        "en": "About {query} I remember: {lines}.",
        "zh": "关于{query}，我记得：{lines}。",
    },
    "recall.more": {"en": " ({n} more not shown)", "zh": "（还有{n}条没有显示）"},
    "recall.hidden": {
        "en": "I have {n} memories about {query} I cannot show here.",
        "zh": "关于{query}我有{n}条记忆，这里不能显示。",
    },
    "forget.none": {
        "en": "I have nothing about {query} to forget.",
        "zh": "关于{query}，我没有可以忘掉的记忆。",
    },
    "forget.done": {"en": "Forgotten: {lines}.", "zh": "已经忘掉：{lines}。"},
    # forgetting whole (hub/memory/erasure.py): the plan card and the report
    "erase.plan": {
        "en": "To forget what you said about {about}, I would delete:",
        "zh": "要忘掉你说过的关于{about}的内容，我会删除：",
    },
    "erase.nothing": {
        "en": "I found nothing about {about} to forget.",
        "zh": "关于{about}，我没找到可以忘掉的内容。",
    },
    "erase.ask": {
        "en": "Nothing is deleted until you approve.",
        "zh": "你批准之前，什么都不会删除。",
    },
    "erase.done": {"en": "Deleted {n} items:", "zh": "已删除 {n} 项："},
    "erase.said": {
        "en": "Forgotten: {n} items deleted.",
        "zh": "已经忘掉：删除了 {n} 项。",
    },
    "erase.not_done": {"en": "Not deleted yet ({n}):", "zh": "还没删掉的（{n} 项）："},
    "erase.denied": {
        "en": "Not approved: nothing was deleted.",
        "zh": "没有批准：什么都没有删除。",
    },
    "people.plan": {
        "en": "To forget {name}, I would delete their {samples} face samples, take their "
        "name off {photos} photo(s), and delete {replies} of my replies that named them:",
        "zh": "要忘掉{name}，我会删除其 {samples} 个人脸样本，从 {photos} 张照片上去掉这个名字，"
        "并删除 {replies} 条提到其名字的回复：",
    },
    "people.forgot": {
        "en": "Forgot {name}: {samples} face samples deleted, their name taken off {photos} "
        "photo(s) and their recall items, {replies} timeline entries deleted.",
        "zh": "已忘掉{name}：删除了 {samples} 个人脸样本，从 {photos} 张照片及其检索条目上去掉了"
        "这个名字，删除了 {replies} 条时间线条目。",
    },
    "erase.layer.timeline": {"en": "timeline entry", "zh": "时间线条目"},
    "erase.layer.reply": {"en": "reply", "zh": "回复"},
    "erase.layer.assertion": {"en": "memory", "zh": "记忆"},
    "erase.layer.derived": {"en": "summary", "zh": "摘要"},
    "erase.layer.index": {"en": "search index entry", "zh": "检索索引条目"},
    "erase.layer.archive": {"en": "archived original", "zh": "归档原件"},
    "erase.layer.cold_chunk": {"en": "cold-pack chunk", "zh": "冷存档包片段"},
    # ------------------------------------------------------------ messages
    "send.subject": {"en": "A message from Yimi", "zh": "来自依米的消息"},
    "send.unknown_contact": {
        "en": "I don't know who {name} is: add them to the address book first.",
        "zh": "我不知道{name}是谁：请先把他们加到通讯录里。",
    },
    "send.no_notes": {"en": "I found no {what} to send.", "zh": "我没有找到要发送的{what}。"},
    "send.done": {"en": "Sent the e-mail to {who}.", "zh": "邮件已发给{who}。"},
    # ------------------------------------------------------------ devices
    "device.unknown": {
        "en": "I found no such device. Devices: {known}.",
        "zh": "我没有找到这个设备。设备有：{known}。",
    },
    "device.none": {"en": "I found no devices.", "zh": "我没有找到任何设备。"},
    "device.on": {"en": "Turning on {name}.", "zh": "正在打开{name}。"},
    "device.off": {"en": "Turning off {name}.", "zh": "正在关闭{name}。"},
    "device.brightness": {
        "en": "Setting {name} to {n}% brightness.",
        "zh": "把{name}的亮度调到百分之{n}。",
    },
    "device.position": {"en": "Setting {name} to {n}% open.", "zh": "把{name}开到百分之{n}。"},
    "device.volume": {
        "en": "Setting {name} to volume {n}%.",
        "zh": "把{name}的音量调到百分之{n}。",
    },
    "device.state": {"en": "{name} is {state}.", "zh": "{name}现在是{state}。"},
    "device.value": {"en": "{name}: {value} {unit}.", "zh": "{name}：{value}{unit}。"},
    "device.no_state": {
        "en": "{name} has not reported a state yet.",
        "zh": "{name}还没有报告状态。",
    },
    "device.is_yes": {"en": "Yes, {name} is {state}.", "zh": "是的，{name}现在{state}。"},
    "device.is_no": {"en": "No, {name} is {state}.", "zh": "没有，{name}现在{state}。"},
    # ------------------------------------------------------------ timeline
    "timeline.empty": {
        "en": "Your timeline has nothing for {period}.",
        "zh": "你{period}的时间线上没有内容。",
    },
    "timeline.list": {
        "en": "On your timeline for {period}: {lines}.",
        "zh": "你{period}的时间线上有：{lines}。",
    },
    "period.today": {"en": "today", "zh": "今天"},
    "period.yesterday": {"en": "yesterday", "zh": "昨天"},
    "period.last_week": {"en": "last week", "zh": "上周"},
    # ------------------------------------------------------------ lists
    "list.shopping": {"en": "shopping list", "zh": "购物清单"},
    "list.todo": {"en": "to-do list", "zh": "待办事项"},
    "list.added": {"en": "Added {item} to your {list}.", "zh": "已把{item}加到{list}。"},
    "list.already": {"en": "{item} is already on your {list}.", "zh": "{item}已经在{list}上了。"},
    "list.completed": {"en": "Checked {item} off your {list}.", "zh": "已把{item}从{list}上勾掉。"},
    "list.not_on": {"en": "{item} is not on your {list}.", "zh": "{list}上没有{item}。"},
    "list.empty": {"en": "Your {list} is empty.", "zh": "你的{list}是空的。"},
    "list.items": {"en": "On your {list}: {lines}.", "zh": "你的{list}上有：{lines}。"},
    # ------------------------------------------------------------ time
    "time.now": {"en": "It's {time}.", "zh": "现在是{time}。"},
    "date.today": {"en": "Today is {date}.", "zh": "今天是{date}。"},
    # ------------------------------------------------------------ orders and payments
    "pay.not_set_up_order": {
        "en": "Payments are not set up on this hub, so I cannot order.",
        "zh": "这个中枢没有设置付款，所以我不能点餐。",
    },
    "pay.not_set_up": {
        "en": "Payments are not set up on this hub.",
        "zh": "这个中枢没有设置付款。",
    },
    "order.no_earlier": {
        "en": "I have no earlier {meal}order to repeat.",
        "zh": "我没有可以重复的{meal}订单。",
    },
    "order.refused": {
        "en": "I can't order or pay for this: {why}.",
        "zh": "这个我不能下单或付款：{why}。",
    },
    "order.no_menu": {
        "en": "I could not open the menu of {shop}: {why}.",
        "zh": "我打不开{shop}的菜单：{why}。",
    },
    "order.no_item": {
        "en": "{shop} has no {item}. The menu: {menu}.",
        "zh": "{shop}没有{item}。菜单有：{menu}。",
    },
    "order.no_items": {"en": "I did not understand what to order.", "zh": "我没听懂要点什么。"},
    "order.no_shop": {
        "en": "Which shop should I order from? Shops: {shops}.",
        "zh": "要从哪家店点？店铺有：{shops}。",
    },
    "order.cart": {
        "en": "I could not fill the cart: {why}.",
        "zh": "我没能把东西放进购物车：{why}。",
    },
    "checkout.waiting": {
        "en": "The checkout says {what}; not paid yet. Approve the card on your phone within "
        "60 seconds{how}.",
        "zh": "结账页面显示：{what}；还没有付款。请在60秒内在手机上批准卡片{how}。",
    },
    "checkout.or_pay_it": {"en": ' — or say "pay it"', "zh": "，或者说“付款”"},
    "checkout.auto": {
        "en": 'Auto-pay: {what} will be paid in {n} seconds unless you say "undo".',
        "zh": "自动付款：{n}秒后将支付{what}，除非你说“撤销”。",
    },
    "checkout.rejected": {
        "en": "I may not go to the checkout: {why}.",
        "zh": "我不能去结账：{why}。",
    },
    "checkout.cancelled": {
        "en": "The order was stopped: {why}. Nothing was paid.",
        "zh": "订单被停止了：{why}。没有付任何钱。",
    },
    "checkout.failed": {
        "en": "The checkout did not work: {why}. Nothing was paid.",
        "zh": "结账没有成功：{why}。没有付任何钱。",
    },
    "checkout.the_order": {"en": "the order", "zh": "这笔订单"},
    "checkout.what": {"en": "{amount} to {payee}", "zh": "向{payee}支付{amount}"},
    "pay.nothing": {"en": "Nothing is waiting to be paid.", "zh": "没有等待付款的订单。"},
    "pay.card_only": {
        "en": "To pay {what}, approve the card on your phone: only the owner's verified voice "
        'can say "pay it".',
        "zh": "要支付{what}，请在手机上批准卡片：只有经过验证的主人的声音才能说“付款”。",
    },
    "pay.card": {
        "en": "To pay {what}, approve the card on your phone ({why}).",
        "zh": "要支付{what}，请在手机上批准卡片（{why}）。",
    },
    "pay.voice_off": {"en": "voice pay is off", "zh": "语音付款已关闭"},
    "pay.not_voice": {"en": "not by voice: {why}", "zh": "不能用语音：{why}"},
    "pay.approved": {
        "en": "Approved by voice: {what}. The payment's result is not in yet.",
        "zh": "已用语音批准：{what}。付款结果还没有出来。",
    },
    "pay.paid": {"en": "Paid {what}.", "zh": "已支付：{what}。"},
    "pay.unconfirmed": {
        "en": "The payment of {what} is not confirmed: I am checking with the provider and "
        "will not pay again.",
        "zh": "{what}的付款还没有确认：我正在向服务商核实，不会重复付款。",
    },
    "pay.not_paid": {"en": "Not paid: {why}.", "zh": "没有付款：{why}。"},
    "undo.owner_only": {"en": "Only the owner can undo a payment.", "zh": "只有主人才能撤销付款。"},
    "undo.undone": {
        "en": "Undone: {what} was not paid.",
        "zh": "已撤销：{what}没有付款。",
    },
    "undo.cancelled": {
        "en": "Cancelled: {what} will not be paid.",
        "zh": "已取消：{what}不会付款。",
    },
    "archive.not_stored": {
        "en": "The audio from {device} was not stored: {reason}",
        "zh": "来自{device}的录音没有保存：{reason}",
    },
    "undo.nothing": {
        "en": "There is no payment I can still undo.",
        "zh": "没有还能撤销的付款。",
    },
}

LANGS = ("en", "zh")


def lang_of(lang: str) -> str:
    return lang if lang in LANGS else "en"


def say(key: str, lang: str, **fields: Any) -> str:
    """The reply ``key`` in ``lang`` with ``fields`` filled in (``KeyError``: no such key)."""
    texts = REPLIES[key]
    return texts.get(lang_of(lang), texts["en"]).format(**fields)


def join(items: list[str], lang: str) -> str:
    """Items of a spoken list: ``a; b; c`` / ``a；b；c``."""
    return ("；" if lang_of(lang) == "zh" else "; ").join(items)


RECALL_ITEMS = 3
"""memories one "what do you remember about …" answer says at most"""
RECALL_CHARS = {"en": 160, "zh": 80}
"""characters of memories one answer says at most (a Chinese character says more)"""


def brief(items: list[str], lang: str) -> tuple[str, int]:
    """Recalled items for a spoken answer: distinct ones, at most ``RECALL_ITEMS`` and
    ``RECALL_CHARS`` characters (the first item cut with "…" if it alone is longer), joined
    as :func:`join`; and how many were left out."""
    limit = RECALL_CHARS[lang_of(lang)]
    seen: set[str] = set()
    kept: list[str] = []
    distinct = 0
    for item in items:
        text = " ".join(item.split()).rstrip(".。!！;；")
        key = text.casefold()
        if not text or key in seen:
            continue
        seen.add(key)
        distinct += 1
        if len(kept) >= RECALL_ITEMS:
            continue
        if not kept and len(text) > limit:
            text = text[: limit - 1].rstrip() + "…"
        if len(join([*kept, text], lang)) > limit:
            continue
        kept.append(text)
    return join(kept, lang), distinct - len(kept)


def joined(sentences: list[str], lang: str) -> str:
    """Whole sentences one after another (no space between Chinese ones)."""
    sep = "" if lang_of(lang) == "zh" else " "
    return sep.join(s for s in sentences if s)


# ---------------------------------------------------------------- time, spoken
_ZH_DIGITS = "零一二三四五六七八九"
_EN_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_ZH_WEEKDAYS = ("星期一", "星期二", "星期三", "星期四", "星期五", "星期六", "星期日")


def zh_number(n: int) -> str:
    """0..99 in Chinese numerals (two → 二, 10 → 十, 23 → 二十三)."""
    if n < 10:
        return _ZH_DIGITS[n]
    tens, ones = divmod(n, 10)
    head = "" if tens == 1 else _ZH_DIGITS[tens]
    return head + "十" + (_ZH_DIGITS[ones] if ones else "")


def spoken_time(t: dt.time | dt.datetime, lang: str) -> str:
    """``5:03 pm`` / ``下午五点零三分``."""
    h, m = t.hour, t.minute
    if lang_of(lang) == "zh":
        if h < 6:
            part = "凌晨"
        elif h < 12:
            part = "上午"
        elif h < 13:
            part = "中午"
        elif h < 18:
            part = "下午"
        else:
            part = "晚上"
        h12 = h % 12 or 12
        hour = "两" if h12 == 2 else zh_number(h12)
        if m == 0:
            return f"{part}{hour}点"
        if m == 30:
            return f"{part}{hour}点半"
        mins = ("零" + zh_number(m)) if m < 10 else zh_number(m)
        return f"{part}{hour}点{mins}分"
    h12 = h % 12 or 12
    suffix = "am" if h < 12 else "pm"
    return f"{h12}:{m:02d} {suffix}"


def spoken_date(d: dt.date, lang: str) -> str:
    """``Tuesday, 1 December 2026`` / ``2026年12月1日，星期二``."""
    if lang_of(lang) == "zh":
        return f"{d.year}年{d.month}月{d.day}日，{_ZH_WEEKDAYS[d.weekday()]}"
    return f"{_EN_WEEKDAYS[d.weekday()]}, {d.day} {d:%B} {d.year}"


def spoken_duration(ms: int, lang: str) -> str:
    """``1 minute and 30 seconds`` / ``一分钟三十秒`` (whole seconds, rounded up)."""
    total = max(0, (ms + 999) // 1000)
    h, rest = divmod(total, 3600)
    m, sec = divmod(rest, 60)
    zh = lang_of(lang) == "zh"
    parts: list[str] = []
    for n, unit in ((h, "hours"), (m, "minutes"), (sec, "seconds")):
        if n or (unit == "seconds" and not parts):
            word = (zh_number(n) if n < 100 else str(n)) if zh else str(n)
            if zh and n == 2:
                word = "两" if unit != "seconds" else "二"
            parts.append(say(f"duration.{unit}" + ("" if n == 1 else "_n"), lang, n=word))
    if len(parts) > 1 and not zh:
        return ", ".join(parts[:-1]) + " and " + parts[-1]  # Chinese: no word between
    return "".join(parts)


def spoken_when(
    at: dt.datetime | None,
    days: tuple[int, ...] | None,
    time: dt.time,
    now: dt.datetime,
    lang: str,
) -> str:
    """When a reminder is due, said back: ``today at 5:00 pm`` / ``明天上午八点`` (one-shot
    ``at``), ``every weekday at 7:30 am`` / ``每周一上午九点`` (recurring on ``days``,
    0 = Monday; ``()`` every day)."""
    zh = lang_of(lang) == "zh"
    spoken = spoken_time(time, lang)
    names = _ZH_WEEKDAYS if zh else _EN_WEEKDAYS
    if at is None:
        if not days:
            return say("when.daily", lang, time=spoken)
        if tuple(days) == (0, 1, 2, 3, 4):
            return say("when.weekdays", lang, time=spoken)
        if tuple(days) == (5, 6):
            return say("when.weekends", lang, time=spoken)
        picked = [names[d].replace("星期", "周") if zh else names[d] for d in days]
        return say("when.weekly", lang, days=("、" if zh else " and ").join(picked), time=spoken)
    gap = (at.date() - now.date()).days
    if gap == 0:
        return say("when.today", lang, time=spoken)
    if gap == 1:
        return say("when.tomorrow", lang, time=spoken)
    if 1 < gap < 7:
        return say("when.weekday", lang, day=names[at.weekday()], time=spoken)
    return say("when.date", lang, date=spoken_date(at.date(), lang), time=spoken)
