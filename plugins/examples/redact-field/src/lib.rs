//! Consume interceptor: in JSON object values, the field named by the `field`
//! setting reads `"***"`; other values pass untouched, or are hidden with
//! `hide-others=true`. The stored record is not changed. Groups listed in
//! `exempt-groups` (comma-separated) see it all.

use weir_plugin::{Config, ConsumeInterceptor, ConsumeVerdict, Error, Record, TopicPartition};

struct RedactField {
    field: String,
    exempt: Vec<String>,
    hide_others: bool,
}

impl ConsumeInterceptor for RedactField {
    fn init(config: &Config) -> Result<Self, Error> {
        let field = config.require("field")?.to_owned();
        let exempt = config
            .get("exempt-groups")
            .unwrap_or("")
            .split(',')
            .filter(|group| !group.is_empty())
            .map(str::to_owned)
            .collect();
        let hide_others = match config.get("hide-others").unwrap_or("false") {
            "true" => true,
            "false" => false,
            other => return Err(Error::invalid_config(format!("hide-others must be true or false, not {other:?}"))),
        };
        Ok(RedactField { field, exempt, hide_others })
    }

    fn on_consume(
        &mut self,
        _source: &TopicPartition,
        group: Option<&str>,
        record: &Record<'_>,
    ) -> Result<ConsumeVerdict, Error> {
        if group.is_some_and(|group| self.exempt.iter().any(|exempt| exempt == group)) {
            return Ok(ConsumeVerdict::Accept);
        }
        let other = if self.hide_others { ConsumeVerdict::Drop } else { ConsumeVerdict::Accept };
        let Some(Ok(serde_json::Value::Object(mut object))) =
            record.value.map(serde_json::from_slice::<serde_json::Value>)
        else {
            return Ok(other);
        };
        match object.get_mut(&self.field) {
            Some(value) => {
                *value = serde_json::Value::String("***".to_owned());
                let bytes = serde_json::to_vec(&object).map_err(|error| Error::internal(error.to_string()))?;
                Ok(ConsumeVerdict::ReplaceValue(Some(bytes)))
            }
            None => Ok(other),
        }
    }
}

weir_plugin::consume_interceptor!(RedactField);
