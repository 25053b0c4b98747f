//! Transform: for JSON object values, reads the string field `field` (setting);
//! records whose field equals `match` (setting) go to output topic 0, records
//! with another value to output topic 1, re-keyed by the field's value;
//! records without it (or not JSON) are filtered out.

use weir_plugin::{Config, Error, Output, Record, TopicPartition, Transform};

struct RouteTransform {
    field: String,
    matching: String,
}

impl Transform for RouteTransform {
    fn init(config: &Config) -> Result<Self, Error> {
        Ok(RouteTransform { field: config.require("field")?.to_owned(), matching: config.require("match")?.to_owned() })
    }

    fn process(&mut self, _input: &TopicPartition, record: &Record<'_>, output: &mut Output) -> Result<(), Error> {
        let Some(Ok(serde_json::Value::Object(object))) = record.value.map(serde_json::from_slice::<serde_json::Value>)
        else {
            return Ok(());
        };
        let Some(serde_json::Value::String(value)) = object.get(&self.field) else { return Ok(()) };
        let topic = if *value == self.matching { 0 } else { 1 };
        let headers: Vec<(&str, Option<&[u8]>)> = record.headers().collect();
        output.emit(topic, record, Some(value.as_bytes()), record.value, &headers);
        Ok(())
    }
}

weir_plugin::transform!(RouteTransform);
