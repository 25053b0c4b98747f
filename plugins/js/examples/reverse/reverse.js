// Transform "reverse": every input record goes to output topic 0 with its
// value reversed byte-wise; key, headers and timestamp are kept.

import { log } from 'weir:plugin/host@0.1.0';
import { BatchBuilder, fail, records } from './weir-plugin.js';

// The world exports interface `transform`: export an object of that name
// (camelCase of the interface name) holding its functions.
export const transform = {
  init(config) {
    // config: [key, value][]. This plugin takes no settings.
    for (const [key] of config) throw fail('invalid-config', `unknown setting ${JSON.stringify(key)}`);
    log('info', 'reverse: ready');
    return { name: 'reverse', version: '0.1.0' };
  },

  process(input, batch) {
    const out = new BatchBuilder();
    for (const record of records(batch)) {
      const reversed = record.value === null ? null : record.value.slice().reverse();
      out.pushWithValue(record, reversed);
    }
    return { records: out.build(batch), topicIndex: new Uint8Array(out.count) }; // all to topic 0
  },
};
