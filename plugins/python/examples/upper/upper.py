"""Consume interceptor "upper": consumers see values upper-cased (ASCII),
and records whose value is exactly `drop-me` are hidden.

Setting (optional): `drop` = the value to hide (default `drop-me`).
"""

from wit_world import exports
from wit_world.exports.consume_interceptor import Action, Verdicts
from wit_world.imports import host
from wit_world.imports.types import ErrorCode, PluginInfo

import weir_plugin

# Module state lives for the instance (init runs once per instance).
drop_value = b"drop-me"


class ConsumeInterceptor(exports.ConsumeInterceptor):
    def init(self, config):
        global drop_value
        for key, value in config:
            if key == "drop":
                drop_value = value.encode()
            else:
                raise weir_plugin.fail(ErrorCode.INVALID_CONFIG, f"unknown setting {key!r}")
        host.log(host.Level.INFO, f"upper: hiding values equal to {drop_value!r}")
        return PluginInfo(name="upper", version="0.1.0")

    def on_consume(self, source, group, records):
        actions = []
        replacements = weir_plugin.BatchBuilder()
        for record in weir_plugin.records(records):
            if record.value == drop_value:
                actions.append(Action.DROP)
            elif record.value is None or record.value.upper() == record.value:
                actions.append(Action.ACCEPT)
            else:
                actions.append(Action.REPLACE)
                replacements.push_with_value(record, record.value.upper())
        return Verdicts(actions, replacements.build(records))
