"""Home Assistant's MQTT discovery convention, decoded: what a retained config on a discovery
topic announces. Pure functions over untrusted bytes: they never raise (a config that cannot
be read is ignored, as Home Assistant ignores it).

- **Topics**: ``<prefix>/<component>/[<node_id>/]<object_id>/config`` (node and object ids
  of ``[a-zA-Z0-9_-]``), and device-based discovery ``<prefix>/device/<object_id>/config``
  whose payload holds the device (``dev``), its origin (``o``) and its components
  (``cmps``: id → config with its platform ``p``); every other root key is an option shared
  by all components (a component's own keys win). A component given with its platform only
  is removed; so is one left out of a later config of the same device.
- **Abbreviations**: Home Assistant's table (:data:`ABBREVIATIONS`, and
  :data:`DEVICE_ABBREVIATIONS` / :data:`ORIGIN_ABBREVIATIONS` inside ``device`` /
  ``origin``; the availability list's entries use the main table).
- **``~``**: a topic base; a ``*_topic`` value (and an availability entry's ``topic``)
  beginning or ending with ``~`` has it replaced by the base.
- **Removal**: an empty (retained) payload on a config topic removes what it announced.
- **Names**: ``name: null`` (or ``""``, as ESPHome sends for an entity without its own name)
  names the entity after its device; a name is shown after its device's name ("Hall sensor
  Temperature") unless it already begins with it; no name at all: its device class
  ("Bedroom Humidity"), else the device's name, else the object id.
- **Entity ids**: ``<component>.<slug>``, the slug from ``default_entity_id`` or
  ``object_id`` when given, else the topic's object id (no node id), else the name (with a
  node id), else ``<node_id>_<object_id>``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

COMPONENTS = frozenset(
    {"switch", "light", "fan", "cover", "lock", "climate", "sensor", "binary_sensor", "number"}
)
"""the components the home package handles (others are ignored, as HA ignores unknown ones)"""
MAX_CONFIG = 64 * 1024
"""bytes of one discovery payload read (a device-based config holds all its components)"""
MAX_COMPONENTS = 256
"""components of one device-based config kept"""
TOPIC_BASE = "~"

_TOPIC = re.compile(
    r"(?P<component>\w+)/(?:(?P<node>[a-zA-Z0-9_-]+)/)?(?P<object>[a-zA-Z0-9_-]+)/config"
)

# Home Assistant's abbreviations (homeassistant/components/mqtt/abbreviations.py), as
# "short full" pairs.
_PAIRS = """
act_t action_topic  act_tpl action_template  atype automation_type
aux_cmd_t aux_command_topic  aux_stat_tpl aux_state_template  aux_stat_t aux_state_topic
av_tones available_tones  avty availability  avty_mode availability_mode
avty_t availability_topic  avty_tpl availability_template
away_mode_cmd_t away_mode_command_topic  away_mode_stat_tpl away_mode_state_template
away_mode_stat_t away_mode_state_topic  b_tpl blue_template
bri_cmd_tpl brightness_command_template  bri_cmd_t brightness_command_topic
bri_scl brightness_scale  bri_stat_t brightness_state_topic  bri_tpl brightness_template
bri_val_tpl brightness_value_template  clr_temp_cmd_tpl color_temp_command_template
bat_lev_t battery_level_topic  bat_lev_tpl battery_level_template  chrg_t charging_topic
chrg_tpl charging_template  clrm color_mode  clrm_stat_t color_mode_state_topic
clrm_val_tpl color_mode_value_template  clr_temp_cmd_t color_temp_command_topic
clr_temp_stat_t color_temp_state_topic  clr_temp_tpl color_temp_template
clr_temp_val_tpl color_temp_value_template  cln_t cleaning_topic  cln_tpl cleaning_template
cmd_off_tpl command_off_template  cmd_on_tpl command_on_template  cmd_t command_topic
cmd_tpl command_template  cmps components  cod_arm_req code_arm_required
cod_dis_req code_disarm_required  cod_trig_req code_trigger_required
cont_type content_type  curr_temp_t current_temperature_topic
curr_temp_tpl current_temperature_template  def_ent_id default_entity_id  dev device
dev_cla device_class  dock_t docked_topic  dock_tpl docked_template  e encoding
en enabled_by_default  ent_cat entity_category  ent_pic entity_picture  err_t error_topic
err_tpl error_template  fanspd_t fan_speed_topic  fanspd_tpl fan_speed_template
fanspd_lst fan_speed_list  flsh_tlng flash_time_long  flsh_tsht flash_time_short
fx_cmd_tpl effect_command_template  fx_cmd_t effect_command_topic  fx_list effect_list
fx_stat_t effect_state_topic  fx_tpl effect_template  fx_val_tpl effect_value_template
exp_aft expire_after  fan_mode_cmd_tpl fan_mode_command_template
fan_mode_cmd_t fan_mode_command_topic  fan_mode_stat_tpl fan_mode_state_template
fan_mode_stat_t fan_mode_state_topic  frc_upd force_update  g_tpl green_template
hold_cmd_tpl hold_command_template  hold_cmd_t hold_command_topic
hold_stat_tpl hold_state_template  hold_stat_t hold_state_topic  hs_cmd_t hs_command_topic
hs_cmd_tpl hs_command_template  hs_stat_t hs_state_topic  hs_val_tpl hs_value_template
ic icon  img_e image_encoding  init initial  hum_cmd_t target_humidity_command_topic
hum_cmd_tpl target_humidity_command_template  hum_stat_t target_humidity_state_topic
hum_state_tpl target_humidity_state_template  json_attr json_attributes
json_attr_t json_attributes_topic  json_attr_tpl json_attributes_template
lrst_t last_reset_topic  lrst_val_tpl last_reset_value_template  max max  min min
max_hum max_humidity  min_hum min_humidity  max_mirs max_mireds  min_mirs min_mireds
max_temp max_temp  min_temp min_temp  max_kltmp max_kelvin  min_kltmp min_kelvin
mode_cmd_tpl mode_command_template  mode_cmd_t mode_command_topic
mode_stat_t mode_state_topic  mode_stat_tpl mode_state_template  modes modes  name name
o origin  obj_id object_id  off_dly off_delay  on_cmd_type on_command_type  ops options
opt optimistic  osc_cmd_t oscillation_command_topic  osc_cmd_tpl oscillation_command_template
osc_stat_t oscillation_state_topic  osc_val_tpl oscillation_value_template  p platform
pct_cmd_t percentage_command_topic  pct_cmd_tpl percentage_command_template
pct_stat_t percentage_state_topic  pct_val_tpl percentage_value_template  pl payload
pl_arm_away payload_arm_away  pl_arm_home payload_arm_home  pl_arm_nite payload_arm_night
pl_arm_vacation payload_arm_vacation  pl_arm_custom_b payload_arm_custom_bypass
pl_avail payload_available  pl_cln_sp payload_clean_spot  pl_cls payload_close
pl_disarm payload_disarm  pl_hi_spd payload_high_speed  pl_home payload_home
pl_lock payload_lock  pl_loc payload_locate  pl_lo_spd payload_low_speed
pl_med_spd payload_medium_speed  pl_not_avail payload_not_available
pl_not_home payload_not_home  pl_off payload_off  pl_off_spd payload_off_speed
pl_on payload_on  pl_open payload_open  pl_osc_off payload_oscillation_off
pl_osc_on payload_oscillation_on  pl_paus payload_pause  pl_prs payload_press
pl_rst payload_reset  pl_rst_hum payload_reset_humidity  pl_rst_mode payload_reset_mode
pl_rst_pct payload_reset_percentage  pl_rst_pr_mode payload_reset_preset_mode
pl_stop payload_stop  pl_stop_tilt payload_stop_tilt  pl_strt payload_start
pl_stpa payload_start_pause  pl_ret payload_return_to_base  pl_toff payload_turn_off
pl_ton payload_turn_on  pl_trig payload_trigger  pl_unlk payload_unlock
pos_clsd position_closed  pos_open position_open  pow_cmd_t power_command_topic
pow_stat_t power_state_topic  pow_stat_tpl power_state_template
pr_mode_cmd_t preset_mode_command_topic  pr_mode_cmd_tpl preset_mode_command_template
pr_mode_stat_t preset_mode_state_topic  pr_mode_val_tpl preset_mode_value_template
pr_modes preset_modes  r_tpl red_template  ret retain  rgb_cmd_tpl rgb_command_template
rgb_cmd_t rgb_command_topic  rgb_stat_t rgb_state_topic  rgb_val_tpl rgb_value_template
rgbw_cmd_tpl rgbw_command_template  rgbw_cmd_t rgbw_command_topic
rgbw_stat_t rgbw_state_topic  rgbw_val_tpl rgbw_value_template
rgbww_cmd_tpl rgbww_command_template  rgbww_cmd_t rgbww_command_topic
rgbww_stat_t rgbww_state_topic  rgbww_val_tpl rgbww_value_template
send_cmd_t send_command_topic  send_if_off send_if_off  set_fan_spd_t set_fan_speed_topic
set_pos_tpl set_position_template  set_pos_t set_position_topic  pos_t position_topic
pos_tpl position_template  spd_rng_min speed_range_min  spd_rng_max speed_range_max
src_type source_type  stat_cla state_class  stat_clsd state_closed
stat_closing state_closing  stat_jam state_jammed  stat_off state_off  stat_on state_on
stat_open state_open  stat_opening state_opening  stat_stopped state_stopped
stat_locked state_locked  stat_locking state_locking  stat_unlocked state_unlocked
stat_unlocking state_unlocking  stat_t state_topic  stat_tpl state_template
stat_val_tpl state_value_template  step step  stype subtype  sug_dsp_prc
suggested_display_precision  sup_dur support_duration  sup_vol support_volume_set
sup_feat supported_features  sup_clrm supported_color_modes
swing_h_mode_cmd_tpl swing_horizontal_mode_command_template
swing_h_mode_cmd_t swing_horizontal_mode_command_topic
swing_h_mode_stat_tpl swing_horizontal_mode_state_template
swing_h_mode_stat_t swing_horizontal_mode_state_topic  swing_h_modes swing_horizontal_modes
swing_mode_cmd_tpl swing_mode_command_template  swing_mode_cmd_t swing_mode_command_topic
swing_mode_stat_tpl swing_mode_state_template  swing_mode_stat_t swing_mode_state_topic
temp_cmd_tpl temperature_command_template  temp_cmd_t temperature_command_topic
temp_hi_cmd_tpl temperature_high_command_template
temp_hi_cmd_t temperature_high_command_topic  temp_hi_stat_tpl temperature_high_state_template
temp_hi_stat_t temperature_high_state_topic  temp_lo_cmd_tpl temperature_low_command_template
temp_lo_cmd_t temperature_low_command_topic  temp_lo_stat_tpl temperature_low_state_template
temp_lo_stat_t temperature_low_state_topic  temp_stat_tpl temperature_state_template
temp_stat_t temperature_state_topic  temp_unit temperature_unit
tilt_clsd_val tilt_closed_value  tilt_cmd_t tilt_command_topic
tilt_cmd_tpl tilt_command_template  tilt_inv_stat tilt_invert_state  tilt_max tilt_max
tilt_min tilt_min  tilt_opnd_val tilt_opened_value  tilt_opt tilt_optimistic
tilt_status_t tilt_status_topic  tilt_status_tpl tilt_status_template  t topic
uniq_id unique_id  unit_of_meas unit_of_measurement  url_t url_topic  url_tpl url_template
val_tpl value_template  whit_cmd_t white_command_topic  whit_scl white_scale
xy_cmd_t xy_command_topic  xy_stat_t xy_state_topic  xy_val_tpl xy_value_template
"""
ABBREVIATIONS: dict[str, str] = dict(zip(_PAIRS.split()[::2], _PAIRS.split()[1::2], strict=True))
"""short key → full key, for a config's (and each availability entry's) keys"""
DEVICE_ABBREVIATIONS = {
    "cns": "connections",
    "cu": "configuration_url",
    "ids": "identifiers",
    "name": "name",
    "mf": "manufacturer",
    "mdl": "model",
    "mdl_id": "model_id",
    "hw": "hw_version",
    "sw": "sw_version",
    "sa": "suggested_area",
    "sn": "serial_number",
}
"""short key → full key inside ``device``"""
ORIGIN_ABBREVIATIONS = {"name": "name", "sw": "sw_version", "url": "support_url"}
"""short key → full key inside ``origin``"""


@dataclass(frozen=True)
class Discovery:
    """One entity a discovery config announces."""

    key: str
    """what identifies it across configs: ``component [node] object [component id]``"""
    component: str
    node_id: str | None
    object_id: str
    config: dict[str, Any]
    """the config, keys expanded and ``~`` replaced"""


@dataclass(frozen=True)
class Announcement:
    """What one message on a discovery topic says: the entities it now announces (none: it
    removes everything it announced before)."""

    topic: str
    entities: tuple[Discovery, ...]


def _expand(payload: dict[str, Any], table: dict[str, str]) -> dict[str, Any]:
    out = {}
    for key, value in payload.items():
        out[table.get(key, key)] = value
    return out


def expand(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` with every abbreviated key written out (device, origin and availability too)."""
    out = _expand(cfg, ABBREVIATIONS)
    if isinstance(out.get("device"), dict):
        out["device"] = _expand(out["device"], DEVICE_ABBREVIATIONS)
    if isinstance(out.get("origin"), dict):
        out["origin"] = _expand(out["origin"], ORIGIN_ABBREVIATIONS)
    avail = out.get("availability")
    if isinstance(avail, dict):
        avail = [avail]
    if isinstance(avail, list):
        out["availability"] = [_expand(a, ABBREVIATIONS) for a in avail if isinstance(a, dict)]
    else:
        out.pop("availability", None)  # neither an entry nor a list: none
    return out


def _based(value: str, base: str) -> str:
    if value.startswith(TOPIC_BASE):
        return base + value[1:]
    if value.endswith(TOPIC_BASE):
        return value[:-1] + base
    return value


def replace_base(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` with its ``~`` topic base put into its topics (and removed)."""
    if TOPIC_BASE not in cfg:
        return cfg
    out = dict(cfg)
    base = str(out.pop(TOPIC_BASE))
    for key, value in out.items():
        if key.endswith("topic") and isinstance(value, str) and value:
            out[key] = _based(value, base)
    if isinstance(out.get("availability"), list):
        out["availability"] = [
            {**a, "topic": _based(a["topic"], base)}
            if isinstance(a.get("topic"), str) and a["topic"]
            else a
            for a in out["availability"]
        ]
    return out


def parse_topic(prefix: str, topic: str) -> tuple[str, str | None, str] | None:
    """(component, node id, object id) of a discovery topic, or ``None``."""
    if not topic.startswith(prefix + "/"):
        return None
    m = _TOPIC.fullmatch(topic[len(prefix) + 1 :])
    if m is None:
        return None
    return m["component"], m["node"], m["object"]


def _key(*parts: str | None) -> str:
    return " ".join(p for p in parts if p)


def decode(prefix: str, topic: str, payload: bytes) -> Announcement | None:
    """What ``payload`` on ``topic`` announces; ``None`` when it is not a discovery message
    Home Assistant would act on (bad topic, too big, not a JSON object, an unhandled
    component) — then nothing changes."""
    try:
        return _decode(prefix, topic, payload)
    except Exception:  # untrusted input: ignore what cannot be read
        return None


def _decode(prefix: str, topic: str, payload: bytes) -> Announcement | None:
    parsed = parse_topic(prefix, topic)
    if parsed is None or len(payload) > MAX_CONFIG:
        return None
    component, node, obj = parsed
    if component != "device" and component not in COMPONENTS:
        return None
    if not payload:
        return Announcement(topic, ())
    cfg = json.loads(payload)
    if not isinstance(cfg, dict):
        return None
    cfg = expand(cfg)
    if component != "device":
        return Announcement(
            topic, (Discovery(_key(component, node, obj), component, node, obj, replace_base(cfg)),)
        )
    components = cfg.get("components")
    if not isinstance(components, dict):
        return None
    shared = {k: v for k, v in cfg.items() if k != "components"}
    found = []
    for cid, raw in list(components.items())[:MAX_COMPONENTS]:
        if not isinstance(raw, dict):
            continue
        own = expand(raw)
        platform = own.get("platform")
        if platform not in COMPONENTS or set(own) == {"platform"}:
            continue  # unhandled, or removed (its platform only)
        merged = replace_base({**shared, **own})
        found.append(
            Discovery(
                _key(str(platform), node, obj, str(cid)),
                str(platform),
                _key(node, obj),
                str(cid),
                merged,
            )
        )
    return Announcement(topic, tuple(found))


# ---------------------------------------------------------------- names and ids
def slug(text: str) -> str:
    """``text`` as an entity-id part: lower-case ``a-z0-9_`` (empty when nothing is left)."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def device_of(cfg: dict[str, Any]) -> dict[str, Any]:
    d = cfg.get("device")
    return d if isinstance(d, dict) else {}


def friendly_name(d: Discovery) -> str:
    """The name the entity is spoken of by (see the module doc)."""
    dev = device_of(d.config)
    dname = dev.get("name")
    dname = str(dname).strip() if isinstance(dname, str | int | float) and dname != "" else ""
    raw = d.config.get("name", ...)
    name = "" if raw is None or raw is ... else str(raw).strip()
    device_class = d.config.get("device_class")
    if raw is ... and isinstance(device_class, str) and device_class and dname:
        name = device_class.replace("_", " ").capitalize()  # unnamed: its class names it
    if not name:
        return dname or d.object_id
    if dname and not name.lower().startswith(dname.lower()):
        return f"{dname} {name}"
    return name


def entity_slug(d: Discovery, name: str) -> str:
    """The object part of the entity id (see the module doc)."""
    given = d.config.get("default_entity_id")
    if isinstance(given, str) and given:
        domain, _, rest = given.partition(".")
        s = slug(rest if rest and domain == d.component else given)
        if s:
            return s
    given = d.config.get("object_id")
    if isinstance(given, str | int) and slug(str(given)):
        return slug(str(given))
    if d.node_id is None and slug(d.object_id):
        return slug(d.object_id)
    return slug(name) or slug(f"{d.node_id}_{d.object_id}") or "device"
