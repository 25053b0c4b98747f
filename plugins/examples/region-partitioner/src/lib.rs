//! Partitioner: a key `REGION:rest` goes to the partition configured for
//! `REGION` (settings `region.eu=0`, `region.us=1`, …); other keys get the
//! built-in choice. Partitions past the topic's count wrap around.

use std::collections::HashMap;

use weir_plugin::{Config, Error, Partitioner, Record};

struct RegionPartitioner {
    regions: HashMap<String, u32>,
}

impl Partitioner for RegionPartitioner {
    fn init(config: &Config) -> Result<Self, Error> {
        let mut regions = HashMap::new();
        for (key, value) in config.entries() {
            let Some(region) = key.strip_prefix("region.") else { continue };
            let partition = value
                .parse()
                .map_err(|_| Error::invalid_config(format!("{key}={value:?} is not a partition number")))?;
            regions.insert(region.to_owned(), partition);
        }
        if regions.is_empty() {
            return Err(Error::invalid_config("no region.NAME=PARTITION settings"));
        }
        Ok(RegionPartitioner { regions })
    }

    fn partition(&mut self, _topic: &str, partition_count: u32, record: &Record<'_>) -> Result<Option<u32>, Error> {
        let region = record.key_str().and_then(|key| key.split_once(':')).map(|(region, _)| region);
        Ok(region.and_then(|region| self.regions.get(region)).map(|partition| partition % partition_count))
    }
}

weir_plugin::partitioner!(RegionPartitioner);
