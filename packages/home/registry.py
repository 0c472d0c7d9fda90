"""The home as discovery announced it — entities by id, what each config topic announced,
which entity reads which topic — fed one MQTT message at a time (no I/O: the server feeds
it from the broker, tests feed it directly). Never raises on what a message holds."""

from __future__ import annotations

import logging

from packages.home import hass
from packages.home.common import MAX_READING, Entity, entity_from_config

log = logging.getLogger(__name__)
MAX_TOPICS = 10_000
"""topics whose last payload is kept for entities announced later"""
MAX_CACHED = 8 * 1024 * 1024
"""characters of payloads kept for topics no entity reads yet"""
MAX_ENTITIES = 2_000


class Registry:
    def __init__(self, prefix: str = "homeassistant", areas: dict[str, str] | None = None):
        self.prefix = prefix
        self.areas = areas or {}
        self.entities: dict[str, Entity] = {}
        self.by_key: dict[str, str] = {}
        """discovery key → entity id"""
        self.announced: dict[str, set[str]] = {}
        """config topic → the discovery keys it announced"""
        self.by_topic: dict[str, list[tuple[Entity, str]]] = {}
        """reading topic → (entity, role) of every entity reading it"""
        self.last_payload: dict[str, str] = {}
        self.cached = 0
        """characters held in :attr:`last_payload`"""

    def take(self, topic: str, payload: bytes) -> bool:
        """Take one message; whether it changed what an entity says."""
        if topic.startswith(self.prefix + "/") and topic.endswith("/config"):
            try:
                self.discovered(topic, payload)
            except Exception:  # a config no rule foresaw: it changes nothing more
                log.warning("discovery config on %s not taken", topic, exc_info=True)
            return True
        if len(payload) > MAX_READING:
            return False
        text = payload.decode(errors="replace")
        readers = self.by_topic.get(topic)
        self._keep(topic, text, bool(readers))
        for e, role in readers or ():
            e.report(role, text, topic)
        return bool(readers)

    def _keep(self, topic: str, text: str, read: bool) -> None:
        """the topic's last payload, for an entity announced later (bounded: a topic no
        entity reads is kept only within :data:`MAX_TOPICS` and :data:`MAX_CACHED`)"""
        old = self.last_payload.get(topic)
        grown = len(text) - (len(old) if old is not None else 0)
        if not read and old is None and len(self.last_payload) >= MAX_TOPICS:
            return
        if not read and self.cached + grown > MAX_CACHED:
            return
        self.last_payload[topic] = text
        self.cached += grown

    # ---------------------------------------------------------------- discovery
    def discovered(self, topic: str, payload: bytes) -> None:
        a = hass.decode(self.prefix, topic, payload)
        if a is None:
            return  # not a config Home Assistant would take: nothing changes
        keys = {d.key for d in a.entities}
        for gone in self.announced.get(topic, set()) - keys:
            self._remove(gone)
        for d in a.entities:
            self._add(d)
        if keys:
            self.announced[topic] = keys
        else:
            self.announced.pop(topic, None)
        self._index()

    def _remove(self, key: str) -> None:
        entity_id = self.by_key.pop(key, None)
        if entity_id is not None:
            self.entities.pop(entity_id, None)

    def _add(self, d: hass.Discovery) -> None:
        name = hass.friendly_name(d)
        uid = d.config.get("unique_id")
        if uid not in (None, "") and any(
            e.unique_id == str(uid) and e.key != d.key for e in self.entities.values()
        ):
            return  # a second config with the same unique_id is ignored (as in HA)
        entity_id = self.by_key.get(d.key)
        if entity_id is None:
            if len(self.entities) >= MAX_ENTITIES:
                return
            base = f"{d.component}.{hass.entity_slug(d, name)}"
            entity_id, n = base, 1
            while entity_id in self.entities:
                n += 1
                entity_id = f"{base}_{n}"
        object_id = entity_id.split(".", 1)[1]
        e = entity_from_config(d.component, object_id, d.config, self.areas, name=name, key=d.key)
        for t, role in e.readings():
            # the last reading on the topic (a state may arrive before its config; a config
            # seen again keeps what the device said meanwhile)
            if t in self.last_payload:
                e.report(role, self.last_payload[t], t)
        self.by_key[d.key] = entity_id
        self.entities[entity_id] = e

    def _index(self) -> None:
        self.by_topic = {}
        for e in self.entities.values():
            for t, role in e.readings():
                self.by_topic.setdefault(t, []).append((e, role))
