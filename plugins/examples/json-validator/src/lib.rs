//! Produce interceptor: every record's value must be valid JSON (optionally a
//! JSON object, with `require-object=true`); otherwise the producer's batch is
//! refused with the reason per record.

use weir_plugin::{Config, Error, ProduceInterceptor, ProduceVerdict, Record, TopicPartition};

struct JsonValidator {
    require_object: bool,
}

impl ProduceInterceptor for JsonValidator {
    fn init(config: &Config) -> Result<Self, Error> {
        let require_object = match config.get("require-object").unwrap_or("false") {
            "true" => true,
            "false" => false,
            other => return Err(Error::invalid_config(format!("require-object must be true or false, not {other:?}"))),
        };
        Ok(JsonValidator { require_object })
    }

    fn on_produce(&mut self, _target: &TopicPartition, record: &Record<'_>) -> Result<ProduceVerdict, Error> {
        let Some(value) = record.value else { return Ok(ProduceVerdict::Reject("null value is not JSON".into())) };
        Ok(match serde_json::from_slice::<serde_json::Value>(value) {
            Ok(json) if self.require_object && !json.is_object() => ProduceVerdict::Reject("not a JSON object".into()),
            Ok(_) => ProduceVerdict::Accept,
            Err(error) => ProduceVerdict::Reject(format!("invalid JSON: {error}")),
        })
    }
}

weir_plugin::produce_interceptor!(JsonValidator);
