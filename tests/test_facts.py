"""Facts rendered from receipts, and the deterministic reply checker."""

from __future__ import annotations

from hub.gateway.facts import check_reply, chinese_number, facts_of, numbers_in
from hub.gateway.receipts import Effect, Next, Receipt, Value


def sent(status: str = "succeeded", to: str = "ann@example.org") -> Receipt:
    effects = (Effect("email.sent", "service_ack", to, {"to": to, "subject": "Lunch"}),)
    return Receipt(
        status=status,
        effects=effects if status == "succeeded" else (),
        next=Next(retry="forbidden"),
        package="messaging",
        tool="send_email",
        task_id="t",
        call_id="c1",
        effect="send",
        target=to,
    )


def temperature(v: float = 21.5) -> Receipt:
    return Receipt(
        status="succeeded",
        values=(Value("Living room", v, "°C", "sensor"),),
        package="home",
        tool="get_state",
        task_id="t",
        call_id="c2",
        effect="observe",
        target="sensor.living",
    )


def test_chinese_numerals() -> None:
    assert chinese_number("二十一点五") == 21.5
    assert chinese_number("十五") == 15
    assert chinese_number("三百零二") == 302
    assert chinese_number("两") == 2
    assert chinese_number("一万二千") == 12000
    assert chinese_number("abc") is None
    assert numbers_in("现在二十三度") == [(23.0, "°C")]
    assert (21.5, "°C") in numbers_in("It is 21.5 °C inside")


def test_wrong_numbers_with_units_are_removed_in_any_numeral_system() -> None:
    rs = [temperature(21.5)]
    out = check_reply("The living room is 23 °C. Have a nice day.", rs)
    assert out.removed and out.removed[0][0].startswith("The living room is 23")
    assert "Have a nice day." in out.text and "21.5 °C" in out.text  # the fact is added
    out = check_reply("客厅现在二十三度。", rs)
    assert out.removed and "21.5" in out.text
    out = check_reply("客厅现在二十一点五度。", rs)
    assert not out.removed and out.added == []
    out = check_reply("It's 21.5 degrees in the living room.", rs)
    assert not out.removed and out.added == []


def test_sent_and_saved_claims_must_match_receipts() -> None:
    waiting = Receipt(
        status="waiting",
        package="messaging",
        tool="send_email",
        task_id="t",
        call_id="c1",
        effect="send",
        target="ann@example.org",
    )
    out = check_reply("I sent the e-mail to Ann.", [waiting])
    assert out.removed and "Waiting for your confirmation" in out.text
    out = check_reply("邮件已发送。", [waiting])
    assert out.removed
    out = check_reply("The e-mail is not sent yet; it waits for your OK.", [waiting])
    assert not out.removed
    out = check_reply("I saved it to your notes.", [sent()])
    assert out.removed, "a saved claim without any saving receipt contradicts"
    ok = check_reply("Sent it to ann@example.org.", [sent()])
    assert not ok.removed and ok.added == []


def test_suggestions_to_redo_a_forbidden_retry_are_removed() -> None:
    unknown = Receipt(
        status="unknown",
        next=Next(retry="forbidden", check_with="find_sent"),
        package="messaging",
        tool="send_email",
        task_id="t",
        call_id="c1",
        effect="send",
        target="ann@example.org",
    )
    out = check_reply("The server timed out. Shall I try again?", [unknown])
    assert any("redoing" in why for _, why in out.removed)
    assert "could not verify" in out.text
    out = check_reply("要我重试吗？", [unknown])
    assert out.removed


def test_device_state_contradictions() -> None:
    light = Receipt(
        status="succeeded",
        effects=(
            Effect(
                "device.state",
                "verified",
                "light.kitchen",
                {"name": "Kitchen light", "state": "off"},
            ),
        ),
        package="home",
        tool="get_state",
        task_id="t",
        call_id="c",
        effect="observe",
    )
    assert check_reply("The Kitchen light is on.", [light]).removed
    assert not check_reply("The Kitchen light is off.", [light]).removed


def test_missing_facts_are_added_with_voice_form_and_not_repeated_once_said() -> None:
    rs = [sent(), temperature()]
    out = check_reply("All good.", rs)
    assert out.added == [
        "Sent the e-mail to ann@example.org about “Lunch”.",
        "Living room: 21.5 °C.",
    ]
    voice = check_reply("All good.", rs, voice=True)
    assert voice.added == ["Sent to ann@example.org.", "Living room 21.5 °C"]
    said = [f.fact_id for r in rs for f in facts_of(r)]
    assert check_reply("All good.", rs, said=said).added == []


# ---------------------------------------------------------------- Chinese replies
def paid(amount_minor: int = 2500) -> Receipt:
    return Receipt(
        status="succeeded",
        effects=(
            Effect(
                "payment.paid",
                "verified",
                "Lotus Kitchen",
                {"payee": "Lotus Kitchen", "amount_minor": amount_minor, "currency": "EUR"},
            ),
        ),
        values=(Value("amount paid", amount_minor / 100, "EUR", "provider"),),
        package="errands",
        tool="pay",
        task_id="t",
        call_id="c3",
        effect="spend",
        target="Lotus Kitchen",
    )


def switched(state: str = "on") -> Receipt:
    return Receipt(
        status="succeeded",
        effects=(
            Effect("device.set", "verified", "light.kitchen", {"name": "厨房灯", "state": state}),
        ),
        package="home",
        tool="set_state",
        task_id="t",
        call_id="c4",
        effect="physical",
        target="light.kitchen",
    )


def test_facts_render_in_the_reply_language() -> None:
    assert [f.text for f in facts_of(sent(), "zh")] == [
        "邮件已发给ann@example.org（主题：“Lunch”）。"
    ]
    assert [f.text for f in facts_of(switched(), "zh")] == ["已打开厨房灯。"]
    assert facts_of(paid(), "zh")[0].text == "已向Lotus Kitchen支付25.00 EUR。"
    assert facts_of(temperature(), "zh")[0].text == "Living room：21.5 °C。"
    waiting = facts_of(sent("waiting"), "zh")[0]
    assert waiting.text.startswith("正在等你在手机上确认") and "send email" in waiting.text
    # ids do not depend on the language (a fact said in one language is said)
    assert [f.fact_id for f in facts_of(paid(), "zh")] == [f.fact_id for f in facts_of(paid())]


def test_correct_chinese_sentences_are_kept_and_missing_facts_added_in_chinese() -> None:
    out = check_reply("好的，邮件已发给ann@example.org。", [sent()], lang="zh")
    assert out.removed == [] and out.text == "好的，邮件已发给ann@example.org。"
    out = check_reply("好的。", [switched()], lang="zh")
    assert out.text == "好的。已打开厨房灯。"
    out = check_reply("客厅现在二十一点五度，挺舒服的。", [temperature()], lang="zh")
    assert out.removed == [] and out.added == []
    out = check_reply("已支付二十五欧元。", [paid()], lang="zh")
    assert out.removed == [], out.removed
    out = check_reply("现在是下午五点零三分。今天是2026年12月1日，星期二。", [], lang="zh")
    assert out.text == "现在是下午五点零三分。今天是2026年12月1日，星期二。"
    # a claim with no receipt, and a wrong amount, are still taken out in Chinese
    out = check_reply("邮件已发送。", [sent("waiting")], lang="zh")
    assert out.removed and out.text.startswith("正在等你在手机上确认")
    out = check_reply("已支付三十欧元。", [paid()], lang="zh")
    assert out.removed and "30 EUR contradicts" in out.removed[0][1]


def test_amounts_in_any_notation() -> None:
    assert numbers_in("三十元") == [(30.0, "CNY")]
    assert numbers_in("三十块") == [(30.0, "CNY")]
    assert numbers_in("二十五欧元") == [(25.0, "EUR")]
    assert numbers_in("€30.00") == [(30.0, "EUR")]
    assert numbers_in("it was $12.50") == [(12.5, "USD")]
    assert (25.0, "EUR") in numbers_in("25.00 EUR to Lotus Kitchen")
    # a sign before the amount: a wrong one is caught, the right one kept
    assert check_reply("I paid €30.00.", [paid()]).removed
    assert check_reply("I paid €25.00 to Lotus Kitchen.", [paid()]).removed == []
